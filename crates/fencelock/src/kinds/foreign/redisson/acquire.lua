-- Takes a lock kept as Redisson's RLock keeps its own (RedissonLock's
-- tryLockInnerAsync): a hash at the lock's name whose one field,
-- `<client id>:<thread id>`, counts the holder's entries, with an expiry.
-- Each grant here has a field of its own and enters once: a resend whose reply
-- was lost finds its field and counts nothing more.
-- KEYS[1] the lock's name; ARGV[1] lease ms, ARGV[2] the holder's field
-- Returns {1, 1} when granted (the layout has no fence: 1 stands for one the
-- core can count as a grant), {0, pttl} when held
-- by another owner (pttl -1: a holder without an expiry).
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return {1, 1}
end
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
  end
  return {1, 1}
end
return {0, redis.call('PTTL', KEYS[1])}
