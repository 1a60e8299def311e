-- Seed 002's release for a lock holding a random token: delete it only if it still holds ours.
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
else
  return 0
end
