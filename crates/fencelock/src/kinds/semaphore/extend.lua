-- Makes a grant's lease last at least ARGV[2] ms from now, if it still stands.
-- It never shortens the grant (see value/extend.lua).
-- KEYS[1] semaphore hash; ARGV[1] grant field, ARGV[2] lease ms,
-- ARGV[3] fence memory ms (how long the total outlives the lease), ARGV[4]
-- 'exactly' (optional): see value/extend.lua
-- Returns 1 extended, 0 the grant is gone (released, or its lease ended).
local now = server_ms()
local expiry = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if not expiry then
  return 0
end
if expiry <= now then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 0
end
local lease = tonumber(ARGV[2])
if ARGV[4] == 'exactly' then
  redis.call('HSET', KEYS[1], ARGV[1], now + lease)
else
  lengthen(KEYS[1], ARGV[1], now + lease)
end
stretch(KEYS[1], lease + tonumber(ARGV[3]))
return 1
