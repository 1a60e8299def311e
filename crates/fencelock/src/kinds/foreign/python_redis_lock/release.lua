-- Releases a python-redis-lock lock if the caller's id is its value, with the
-- effects of python-redis-lock's own UNLOCK script: the signal list is emptied
-- and given one element, which wakes one waiter blocked on it (BLPOP), and it
-- lives ARGV[2] ms; then the lock is deleted.
-- KEYS[1] lock:<name>, KEYS[2] lock-signal:<name>; ARGV[1] owner token,
-- ARGV[2] how long the signal lives, ms (python-redis-lock's signal_expire)
-- Returns 1 released, 0 nothing held, -1 another owner holds it (where
-- python-redis-lock's UNLOCK returns 0, and 1 for both of the others).
local value = redis.call('GET', KEYS[1])
if not value then
  return 0
end
if value ~= ARGV[1] then
  return -1
end
redis.call('DEL', KEYS[2])
redis.call('LPUSH', KEYS[2], 1)
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('DEL', KEYS[1])
return 1
