-- Reads an election's leader.
-- KEYS[1] leader key
-- Returns false when nobody leads, else {stored value, pttl ms} (see
-- acquire.lua for the value's layout).
local held = redis.call('GET', KEYS[1])
if not held then
  return false
end
return {held, redis.call('PTTL', KEYS[1])}
