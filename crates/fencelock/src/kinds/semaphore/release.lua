-- Gives a grant's permits back (and drops its holder label), and wakes as many waiters per process as
-- there are permits free.
-- KEYS[1] semaphore hash; ARGV[1] grant field, ARGV[2] wake channel
-- Returns 1 released, 0 the grant is gone (released, or its lease ended).
-- Expired grants are deleted first, by the server's clock.
local now = server_ms()
local expiry = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
local used = held_permits(KEYS[1], now, true)
if not expiry or expiry <= now then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[1], 'l:' .. ARGV[1])
local count = tonumber(string.match(ARGV[1], ':(%d+)$')) or 0
local total = tonumber(redis.call('HGET', KEYS[1], 'permits'))
if total and total > used - count then
  redis.call(PUBLISH, ARGV[2], string.format('%d', total - used + count))
end
return 1
