-- An operator's release of a lock kept in another library's layout, whoever
-- holds it, with the effects of that library's own release: the lock's key
-- deleted; for python-redis-lock the signal list emptied and given one element,
-- which wakes one of its waiters; for Redisson the unlock message published on
-- the lock's channel. Replies what it found first.
-- KEYS[1] the lock's key, KEYS[2] python-redis-lock's signal list (that layout
-- only); ARGV[1] the family: 'token', 'python-redis-lock' or 'redisson';
-- ARGV[2] the signal's life in ms (python-redis-lock), or Redisson's channel;
-- ARGV[3] Redisson's unlock message
-- Returns {value or false, pttl, fields (flat)}: a string key's value, or a
-- hash's fields; {false, -2, {}} when the key holds neither (it is left alone).
local kind = redis.call('TYPE', KEYS[1])['ok']
local family = ARGV[1]
local value, fields = false, {}
if family == 'redisson' and kind == 'hash' then
  fields = redis.call('HGETALL', KEYS[1])
elseif family ~= 'redisson' and kind == 'string' then
  value = redis.call('GET', KEYS[1])
else
  return {false, -2, {}}
end
local pttl = redis.call('PTTL', KEYS[1])
redis.call('DEL', KEYS[1])
if family == 'python-redis-lock' then
  redis.call('DEL', KEYS[2])
  redis.call('LPUSH', KEYS[2], 1)
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
elseif family == 'redisson' then
  redis.call(PUBLISH, ARGV[2], ARGV[3])
end
return {value, pttl, fields}
