-- Takes a lock kept as python-redis-lock keeps its own: lock:<name> set to the
-- owner's id with an expiry in whole seconds, only if it does not exist (its
-- SET NX EX).
-- KEYS[1] lock:<name>; ARGV[1] owner token, ARGV[2] lease in whole seconds
-- Returns {1, 1} when granted (the layout has no fence: 1 stands for one the
-- core can count as a grant), {0, pttl} when held
-- by another owner (pttl -1: a holder without an expiry).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then
  return {1, 1}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  -- A resend of a grant whose reply was lost: answered again.
  local lease_ms = tonumber(ARGV[2]) * 1000
  if redis.call('PTTL', KEYS[1]) < lease_ms then
    redis.call('PEXPIRE', KEYS[1], lease_ms)
  end
  return {1, 1}
end
return {0, redis.call('PTTL', KEYS[1])}
