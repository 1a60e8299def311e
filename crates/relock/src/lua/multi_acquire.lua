-- Takes several mutex names together when every one of them is free: all or none.
-- KEYS[1..n] the names' lock keys, KEYS[n+1..2n] their fence keys, in the same order
-- ARGV[1] owner token (ends with ':'), ARGV[2] lease ms,
-- ARGV[3] fence memory ms (beyond the lease), ARGV[4] holder label ('' for none)
-- Returns {1, fence_1, ..., fence_n} when granted, {0, pttl} when any name is held
-- by another owner, pttl being the longest remaining lease among those names
-- (-1 when one of them has no expiry).
-- Each lock key gets the Mutex's value, token .. fence [.. ':' .. label], so a
-- Mutex of one of the names and this lock exclude each other.
local n = #KEYS / 2
local token = ARGV[1]
local lease = tonumber(ARGV[2])

-- Every key is read before any is written: a refusal, or a key of another
-- type, leaves all of them as they were.
local ours = {}
local longest
for i = 1, n do
  local held = redis.call('GET', KEYS[i])
  if held then
    if string.sub(held, 1, #token) == token then
      ours[i] = held
    else
      local pttl = redis.call('PTTL', KEYS[i])
      if pttl < 0 then
        longest = -1
      elseif longest == nil or (longest ~= -1 and pttl > longest) then
        longest = pttl
      end
    end
  end
end

if longest then
  -- Keys of this token exist only when an earlier send of the same request was
  -- granted and part of that grant was deleted since: keep none of it.
  for i = 1, n do
    if ours[i] then
      redis.call('DEL', KEYS[i])
    end
  end
  return {0, longest}
end

-- The fences first: a fence key of another type then fails the script before
-- any lock key is written.
local reply = {1}
local texts = {}
for i = 1, n do
  if ours[i] then
    -- A resend of a grant whose reply was lost: the same fence again.
    reply[i + 1] = tonumber(string.match(ours[i], '^[^:]*:(%d+)'))
  else
    reply[i + 1], texts[i] = next_fence(KEYS[n + i], lease + tonumber(ARGV[3]))
  end
end
for i = 1, n do
  if ours[i] then
    if redis.call('PTTL', KEYS[i]) < lease then
      redis.call('PEXPIRE', KEYS[i], lease)
    end
  else
    local value = token .. texts[i]
    if ARGV[4] ~= '' then
      value = value .. ':' .. ARGV[4]
    end
    redis.call('SET', KEYS[i], value, 'PX', lease)
  end
end
return reply
