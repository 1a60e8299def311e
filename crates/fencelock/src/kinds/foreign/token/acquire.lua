-- Takes a lock kept as the plain-token libraries keep theirs (redis-py's Lock,
-- node-redlock, go-redsync, pottery, redis-semaphore's Mutex, rslock): the key
-- set to the owner's token with an expiry, only if it does not exist, as each
-- of them does with SET NX PX.
-- KEYS[1] the key; ARGV[1] owner token, ARGV[2] lease ms
-- Returns {1, 1} when granted (the layout has no fence: 1 stands for one the
-- core can count as a grant), {0, pttl} when
-- held by another owner (pttl -1: a holder without an expiry).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, 1}
end
-- Strings are compared byte for byte: a peer's value may be any bytes (rslock's
-- are raw random ones).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  -- A resend of a grant whose reply was lost: answered again.
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return {1, 1}
end
return {0, redis.call('PTTL', KEYS[1])}
