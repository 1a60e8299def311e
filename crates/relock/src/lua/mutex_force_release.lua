-- An operator's release of a mutex, whoever holds it: returns what it removed.
-- KEYS[1] lock key; ARGV[1] wake channel
-- Returns {value, pttl} of the removed lock, or false when nothing was held.
local value = redis.call('GET', KEYS[1])
if not value then
  return false
end
local pttl = redis.call('PTTL', KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[1], '')
return {value, pttl}
