-- Sets a semaphore's total. Grants held stay held, even above a lowered
-- total; raising it wakes as many waiters per process as permits are free.
-- KEYS[1] semaphore hash; ARGV[1] total, ARGV[2] ms to keep the total at
-- least, ARGV[3] wake channel
-- Returns 1.
local now = server_ms()
local total = tonumber(ARGV[1])
local before = tonumber(redis.call('HGET', KEYS[1], 'permits'))
redis.call('HSET', KEYS[1], 'permits', ARGV[1])
stretch(KEYS[1], tonumber(ARGV[2]))
local used = held_permits(KEYS[1], now, true)
if total > used and (not before or total > before) then
  redis.call(PUBLISH, ARGV[3], string.format('%d', total - used))
end
return 1
