-- The forced release of a value laid out as a mutex's (value.lua), shared by
-- the kinds that keep one: prepended to their forced release at build time,
-- after value.lua and core/force.lua, whose helpers it uses.

-- Takes the value under `key`: a held one leaves its fence behind, as a
-- release does; a released one is not held and stays as it is. Returns the
-- value and its pttl found, or false and -2.
local function take_value(key, memory_ms)
  if not of_type(key, 'string') then
    return false, -2
  end
  local value = redis.call('GET', key)
  if is_released(value) then
    return false, -2
  end
  local pttl = redis.call('PTTL', key)
  leave_released(key, fence_text(value), memory_ms)
  return value, pttl
end
