-- Releases a Redisson RLock held by the caller's field, with the effects of
-- the last exit of Redisson's unlockInnerAsync: the hash deleted and the unlock
-- message published on the lock's channel, which lets one waiter of each
-- subscribed client try again. (The unlock latch Redisson sets is for its own
-- retries of one request; a resend here is answered by the field's absence.)
-- KEYS[1] the lock's name; ARGV[1] the holder's field, ARGV[2] the lock's
-- channel, ARGV[3] the unlock message ('0')
-- Returns 1 released, 0 nothing held, -1 another owner holds it.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
redis.call('DEL', KEYS[1])
redis.call(PUBLISH, ARGV[2], ARGV[3])
return 1
