-- Makes a hold's lease last at least ARGV[2] ms from now, if it has not
-- expired. It never shortens the hold (see value/extend.lua).
-- KEYS[1] lock hash; ARGV[1] the hold's field, ARGV[2] lease ms, ARGV[3]
-- 'exactly' (optional): see value/extend.lua (the hash itself never shortens:
-- other holds may need it)
-- Returns 1 extended, 0 the hold is gone or expired.
local key, lease = KEYS[1], tonumber(ARGV[2])
local now = server_ms()
local expiry = tonumber(redis.call('HGET', key, ARGV[1]))
-- An expired hold stays dead even before a purge removed it: the lock was
-- free from its expiry on, whether or not anyone took it since.
if not expiry or expiry <= now then
  return 0
end
if ARGV[3] == 'exactly' then
  redis.call('HSET', key, ARGV[1], now + lease)
else
  lengthen(key, ARGV[1], now + lease)
end
stretch(key, lease)
return 1
