-- Releases a mutex if the caller owns it, leaving the name's last fence behind
-- (value.lua), or gives up the caller's place among the waiters; then,
-- if someone waits, wakes one waiter and keeps the lock for it a moment.
-- KEYS[1] lock key, KEYS[2] waiters (see acquire.lua)
-- ARGV[1] owner token, ARGV[2] wake channel, ARGV[3] how long the lock is kept
-- for the woken waiter, ms; ARGV[4] fence memory ms
-- Returns 1 released, 0 the caller does not hold it and it is free, -1 another
-- owner holds it.
local token = ARGV[1]
local hand_off = tonumber(ARGV[3])
local memory = tonumber(ARGV[4])

-- Wakes the waiter whose place ends first, by its token, on its client's own
-- channel of the name, and keeps the lock for it for the hand-off time: that
-- is the waiter that took or renewed its place the longest ago. Waiters whose
-- place ended are dropped on the way. Returns whether one was woken.
local function wake_placed(fence)
  local now
  -- Bounded: each pass drops one waiter, or wakes one.
  for _ = 1, 16 do
    local first = redis.call('ZPOPMIN', KEYS[2])
    if #first == 0 then
      return false
    end
    local waiter, ends = first[1], tonumber(first[2])
    now = now or server_ms()
    if waiter ~= token and ends > now then
      leave_released(KEYS[1], fence, math.max(memory, hand_off), waiter, now + hand_off)
      redis.call(PUBLISH, channel_of(ARGV[2], waiter), waiter)
      return true
    end
  end
  return false
end

-- Wakes a placed waiter; with none, wakes one waiter in each listening process
-- (waiters without a place: a multi-lock's, or any waiter where several
-- masters keep no line), named by this release's token so that a waiter
-- hearing it from several masters counts it once. `fence` is nil when the key
-- is gone: then nothing is left behind unless a waiter is woken.
local function wake_next(fence)
  if wake_placed(fence) then
    return
  end
  if fence then
    leave_released(KEYS[1], fence, memory)
  end
  redis.call(PUBLISH, ARGV[2], '~' .. token)
end

local value = redis.call('GET', KEYS[1])
if value and not is_released(value) then
  if string.sub(value, 1, #token) ~= token then
    -- A waiter giving up while another owner holds the lock.
    redis.call('ZREM', KEYS[2], token)
    return -1
  end
  if is_marked(value) then
    wake_next(fence_text(value))
  else
    leave_released(KEYS[1], fence_text(value), memory)
  end
  return 1
end
-- A waiter giving up, or a holder whose lease ended. The lock is free, and a
-- wake meant for this token may be lost with it: pass it on to the next placed
-- waiter, unless the lock is kept for another waiter.
redis.call('ZREM', KEYS[2], token)
local waiter, until_ms
if value then
  waiter, until_ms = promise(value)
end
if not waiter or waiter == token or until_ms <= server_ms() then
  wake_placed(value and fence_text(value))
end
return 0
