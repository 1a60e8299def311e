-- An operator's release of a reentrant mutex, every hold of its owner
-- (core/force.lua).
-- KEYS[1] the lock's hash; ARGV[1] wake channel
local fields, pttl = {}, -2
if of_type(KEYS[1], 'hash') then
  fields = redis.call('HGETALL', KEYS[1])
  pttl = redis.call('PTTL', KEYS[1])
  redis.call('DEL', KEYS[1])
  redis.call(PUBLISH, ARGV[1], '')
end
return {now, false, pttl, fields, 0}
