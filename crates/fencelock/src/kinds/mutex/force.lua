-- An operator's release of a mutex, whoever holds it (core/force.lua).
-- KEYS[1] lock key; ARGV[1] wake channel, ARGV[2] fence memory ms
local value, pttl = take_value(KEYS[1], tonumber(ARGV[2]))
if value then
  redis.call(PUBLISH, ARGV[1], '')
end
return {now, value, pttl, {}, 0}
