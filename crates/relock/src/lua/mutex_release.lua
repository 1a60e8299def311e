-- Releases a mutex if the caller still owns it, and wakes waiters.
-- KEYS[1] lock key; ARGV[1] owner token, ARGV[2] wake channel, ARGV[3] announcement
-- ('' on one server; on RedLock '~' and the token, so that waiters hearing it from several
-- masters count it once)
-- Returns 1 released, 0 the key is gone, -1 another owner holds it.
local held = redis.call('GET', KEYS[1])
if not held then
  return 0
end
if string.sub(held, 1, #ARGV[1]) ~= ARGV[1] then
  return -1
end
redis.call('DEL', KEYS[1])
redis.call(PUBLISH, ARGV[2], ARGV[3])
return 1
