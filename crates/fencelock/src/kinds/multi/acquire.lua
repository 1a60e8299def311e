-- Takes several mutex names together when every one of them is free: all or none.
-- KEYS[1..n] the names' lock keys
-- ARGV[1] owner token (ends with ':'), ARGV[2] lease ms, ARGV[3] holder label
-- ('' for none)
-- A refused attempt marks the values held by others, so that their releases
-- wake the multi-lock's waiters (a single try's as well: it costs that release
-- one announcement nobody hears).
-- Returns {1, fence_1, ..., fence_n} when granted, {0, pttl} when any name is held
-- by another owner, pttl being the longest remaining lease among those names
-- (-1 when one of them has no expiry).
-- Each lock key gets the Mutex's value (value/value.lua), so a Mutex of one of
-- the names and this lock exclude each other, and each name's fences keep rising
-- across both.
local n = #KEYS
local token = ARGV[1]
local lease = tonumber(ARGV[2])

-- How long a value keeps the name from this caller: nil when it does not.
local function refusal(key, value)
  if not is_released(value) then
    return redis.call('PTTL', key)
  end
end

-- Every key is read before any is written: a refusal, or a key of another
-- type, leaves all of them as they were.
local values = {}
local ours = {}
local longest
for i = 1, n do
  local value = redis.call('GET', KEYS[i])
  values[i] = value
  if value and not is_released(value) and string.sub(value, 1, #token) == token then
    ours[i] = true
  elseif value then
    local pttl = refusal(KEYS[i], value)
    if pttl and pttl < 0 then
      longest = -1
    elseif pttl and (longest == nil or (longest ~= -1 and pttl > longest)) then
      longest = pttl
    end
  end
end

if longest then
  for i = 1, n do
    if ours[i] then
      -- Keys of this token exist only when an earlier send of the same
      -- request was granted and part of that grant was deleted since: keep
      -- none of it, leaving the fence behind.
      redis.call('SET', KEYS[i], '~' .. fence_text(values[i]), 'KEEPTTL')
    elseif values[i] and not is_released(values[i]) and not is_marked(values[i]) then
      redis.call('SET', KEYS[i], marked(values[i]), 'KEEPTTL')
    end
  end
  return {0, longest}
end

local reply = {1}
for i = 1, n do
  if ours[i] then
    -- A resend of a grant whose reply was lost: the same fence again.
    reply[i + 1] = tonumber(fence_text(values[i]))
    if redis.call('PTTL', KEYS[i]) < lease then
      redis.call('PEXPIRE', KEYS[i], lease)
    end
  else
    local fence, text = fence_after(values[i] and tonumber(fence_text(values[i])))
    reply[i + 1] = fence
    redis.call('SET', KEYS[i], held_value(token, text, false, ARGV[3]), 'PX', lease)
  end
end
return reply
