-- Makes a reentrant mutex last at least a lease from now, if the hold is
-- still there. It never shortens the lock: the owner's other holds may rely
-- on a longer lease.
-- KEYS[1] lock hash; ARGV[1] hold token, ARGV[2] lease ms (a further
-- argument, 'exactly', is not heeded here: it could shorten the other holds)
-- Returns 1 extended, 0 that hold is gone.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
