-- Makes a mutex's lease last at least ARGV[2] ms from now, if the caller still
-- owns it. It never shortens the lease: the holder's guard, and its renewals
-- in flight, count on the longest expiry they were told of.
-- KEYS[1] lock key; ARGV[1] owner token, ARGV[2] lease ms, ARGV[3] 'exactly'
-- (optional) to set the lease to ARGV[2] ms even if that shortens it: only for
-- a grant being given up, whose guard claims nothing afterwards
-- Returns 1 extended, 0 the lock is free (gone or released) or only offered to
-- the caller's token, which has not claimed it (value.lua), -1 another owner
-- holds it.
local held = redis.call('GET', KEYS[1])
if not held or is_released(held) then
  return 0
end
if string.sub(held, 1, #ARGV[1]) ~= ARGV[1] then
  return -1
end
if is_offer(held) then
  return 0
end
if ARGV[3] == 'exactly' or redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
