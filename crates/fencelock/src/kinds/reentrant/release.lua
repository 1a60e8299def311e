-- Gives back one hold of a reentrant mutex; the last one frees it.
-- KEYS[1] lock hash; ARGV[1] hold token, ARGV[2] wake channel
-- Returns 1 released, 0 that hold is gone (expired, or released before).
-- Only the owner that was granted a hold knows its token, so a token present
-- is proof of ownership; a token absent changes nobody's count, which keeps
-- resent and cancelled releases harmless.
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if redis.call('HINCRBY', KEYS[1], 'count', -1) <= 0 then
  redis.call('DEL', KEYS[1])
  redis.call(PUBLISH, ARGV[2], '')
end
return 1
