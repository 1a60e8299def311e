-- Releases a mutex if the caller owns it, leaving the name's last fence behind
-- (mutex_value.lua), or gives up the caller's place among the waiters; then,
-- if someone waits, wakes one waiter and keeps the lock for it a moment.
-- KEYS[1] lock key, KEYS[2] waiters (see mutex_acquire.lua)
-- ARGV[1] owner token, ARGV[2] wake channel, ARGV[3] announcement: '' to wake
-- the first waiter whose place has not ended, on its client's own channel of
-- the name; on RedLock, where no master
-- keeps places, '~' and the token, so that waiters hearing it from several
-- masters count it once; ARGV[4] how long the lock is kept for the woken
-- waiter, ms; ARGV[5] fence memory ms
-- Returns 1 released, 0 the caller does not hold it and it is free, -1 another
-- owner holds it.
local token = ARGV[1]
local memory = tonumber(ARGV[5])

-- Wakes the waiter whose place ends first, by its token, and keeps the lock
-- for it for ARGV[4] ms: that is the waiter that took or renewed its place
-- the longest ago. Waiters whose place ended are dropped on the way. With
-- none, wakes one waiter in each process (waiters without a place: a
-- multi-lock's). `fence` is nil when the key is gone: then nothing is left
-- behind unless a waiter is woken.
local function wake_next(fence)
  local now
  -- Bounded: each pass drops one waiter, or wakes one.
  for _ = 1, 16 do
    local first = redis.call('ZPOPMIN', KEYS[2])
    if #first == 0 then
      break
    end
    local waiter, ends = first[1], tonumber(first[2])
    now = now or server_ms()
    if waiter ~= token and ends > now then
      local hand_off = tonumber(ARGV[4])
      leave_released(KEYS[1], fence, math.max(memory, hand_off), waiter, now + hand_off)
      redis.call(PUBLISH, channel_of(ARGV[2], waiter), waiter)
      return
    end
  end
  if fence then
    leave_released(KEYS[1], fence, memory)
  end
  redis.call(PUBLISH, ARGV[2], '')
end

local value = redis.call('GET', KEYS[1])
if value and not is_released(value) then
  if string.sub(value, 1, #token) ~= token then
    -- A waiter giving up while another owner holds the lock.
    redis.call('ZREM', KEYS[2], token)
    return -1
  end
  if ARGV[3] ~= '' then
    -- RedLock keeps the name's fence in the fence key.
    redis.call('DEL', KEYS[1])
    redis.call(PUBLISH, ARGV[2], ARGV[3])
  elseif is_marked(value) then
    wake_next(fence_text(value))
  else
    leave_released(KEYS[1], fence_text(value), memory)
  end
  return 1
end
-- A waiter giving up, or a holder whose lease ended. The lock is free, and a
-- wake meant for this token may be lost with it: pass it on, unless it is
-- kept for another waiter. (On RedLock a refused attempt releases every
-- master; waking there would wake a waiter per refusal.)
redis.call('ZREM', KEYS[2], token)
if ARGV[3] == '' then
  local waiter, until_ms
  if value then
    waiter, until_ms = promise(value)
  end
  if not waiter or waiter == token or until_ms <= server_ms() then
    wake_next(value and fence_text(value))
  end
end
return 0
