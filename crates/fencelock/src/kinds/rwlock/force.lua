-- An operator's release of every read and write hold of a read-write lock
-- (core/force.lua). Waiting writers' markers stay: they are waiters.
-- KEYS[1] the lock's hash; ARGV[1] readers' channel, ARGV[2] writers' channel
local fields, removed = take_fields(KEYS[1], function(field)
  return string.match(field, '^[rw][^:]*:') ~= nil
    or field == 'fence-r' or field == 'fence-w'
end)
if removed > 0 then
  redis.call(PUBLISH, ARGV[1], '*')
  redis.call(PUBLISH, ARGV[2], '')
end
return {now, false, -2, fields, 0}
