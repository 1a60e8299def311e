-- An operator's release of every grant of a semaphore (core/force.lua). The
-- total stays.
-- KEYS[1] the semaphore's hash; ARGV[1] wake channel
local fields, removed = take_fields(KEYS[1], function(field)
  return string.match(field, '^[^:]+:%d+$') ~= nil
    or string.match(field, '^l:[^:]+:%d+$') ~= nil
end)
if removed > 0 then
  local total = redis.call('HGET', KEYS[1], 'permits')
  redis.call(PUBLISH, ARGV[1], total or '*')
end
return {now, false, -2, fields, 0}
