-- Makes a Redisson RLock's expiry at least ARGV[2] ms from now if the caller's
-- field holds it (as Redisson's watchdog does, with PEXPIRE); never shortens
-- it, unless ARGV[3] is 'exactly'.
-- KEYS[1] the lock's name; ARGV[1] the holder's field, ARGV[2] lease ms,
-- ARGV[3] 'exactly' (optional)
-- Returns 1 extended, 0 nothing held, -1 another owner holds it.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
if ARGV[3] == 'exactly' or redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
