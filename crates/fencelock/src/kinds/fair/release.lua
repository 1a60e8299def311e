-- Releases a fair lock if the caller holds it, leaving the name's last fence
-- behind (value/value.lua), or gives up the caller's place in line. When
-- someone waits, the lock is offered at once to the first in line whose place
-- has not ended (hand_over, value/value.lua), even if its client hears nothing
-- right now: a client reconnecting its pub/sub connection keeps its turn, and
-- one that never claims costs the window.
-- KEYS[1] lock key, KEYS[2] line, KEYS[3] places (see acquire.lua)
-- ARGV[1] owner token, ARGV[2] wake channel, ARGV[3] fence memory ms,
-- ARGV[4] the caller's place member (its token, lease and label), ARGV[5] the
-- handoff window ms
-- Returns 1 released, 0 not held (the lock is free or expired), -1 another
-- owner holds it.
local token = ARGV[1]
local memory = tonumber(ARGV[3])
local window = tonumber(ARGV[5])
local line = fair_line(KEYS[2], KEYS[3], nil)

local function leave_line()
  redis.call('ZREM', KEYS[2], ARGV[4])
  redis.call('ZREM', KEYS[3], ARGV[4])
end

local value = redis.call('GET', KEYS[1])
if value and not is_released(value) then
  if string.sub(value, 1, #token) ~= token then
    -- A waiter giving up while another owner holds the lock.
    leave_line()
    return -1
  end
  local fence = fence_text(value)
  -- A value nobody was refused on has nobody waiting.
  if not is_marked(value) or not hand_over(KEYS[1], fence, ARGV[2], line, window) then
    leave_released(KEYS[1], fence, memory)
  end
  return 1
end
-- A waiter giving up, or a holder whose lease ended. The lock is free: it is
-- offered to the first in line, if one waits.
leave_line()
hand_over(KEYS[1], value and fence_text(value), ARGV[2], line, window)
return 0
