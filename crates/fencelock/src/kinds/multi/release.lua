-- Releases every name of a multi-lock still held by the caller, leaving each
-- name's last fence behind (value/value.lua). A name someone waited for is
-- offered at once to its Mutex waiter whose place ends first and whose client
-- still listens, as a Mutex release offers it; with none, one waiter in each
-- listening process is woken (the payload empty: a multi-lock's waiters keep no
-- place).
-- KEYS[1..n] the names' lock keys, KEYS[n+1..2n] the names' places, in the
-- same order; ARGV[1] owner token, ARGV[2] fence memory ms, ARGV[3..n+2] the
-- names' wake channels, in the order of KEYS, ARGV[n+3] the handoff window ms
-- Returns 1 every name was held and is released, 0 none was held by the
-- caller any more, -1 only some were (those are released; the others had
-- expired, been deleted or been taken).
-- A key of another type is not the caller's: reading it through pcall lets
-- the other names still be released.
local n = #KEYS / 2
local token = ARGV[1]
local memory = tonumber(ARGV[2])
local window = tonumber(ARGV[n + 3])

local released = 0
for i = 1, n do
  local key = KEYS[i]
  local held = redis.pcall('GET', key)
  if type(held) == 'string' and string.sub(held, 1, #token) == token then
    local fence = fence_text(held)
    if not is_marked(held) then
      leave_released(key, fence, memory)
    else
      local handed, last = hand_over(key, fence, ARGV[i + 2], places_line(KEYS[n + i], nil, true),
        window)
      if not handed then
        leave_released(key, last, memory)
        redis.call(PUBLISH, ARGV[i + 2], '')
      end
    end
    released = released + 1
  end
end
if released == n then
  return 1
elseif released == 0 then
  return 0
end
return -1
