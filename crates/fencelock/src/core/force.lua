-- Shared by the forced release of each kind, an operator's release of every
-- hold of that kind under one name, whoever holds it: prepended to each at
-- build time. Each replies what it found before removing it:
-- {server ms, value or false, pttl, fields (flat), waiters with a live place}.
-- A key of another type than its kind uses is none of ours and is left alone.
-- The fence key is never touched, and a mutex leaves its fence behind
-- (kinds/value/take.lua), so fences keep rising.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function of_type(key, wanted)
  return redis.call('TYPE', key)['ok'] == wanted
end

local function absent_or(key, wanted)
  local found = redis.call('TYPE', key)['ok']
  return found == wanted or found == 'none'
end

-- Deletes the fields for which `is_hold` is true; returns every field read and
-- how many were deleted.
local function take_fields(key, is_hold)
  if not of_type(key, 'hash') then
    return {}, 0
  end
  local flat = redis.call('HGETALL', key)
  local removed = 0
  for i = 1, #flat, 2 do
    if is_hold(flat[i]) then
      redis.call('HDEL', key, flat[i])
      removed = removed + 1
    end
  end
  return flat, removed
end
