-- Releases a fair lock if the caller holds it, leaving the name's last fence
-- behind (mutex/value.lua), or gives up the caller's place in line; then, if
-- the lock is free and someone waits, keeps it for the first waiter in line
-- and wakes that waiter alone (the payload is its token).
-- KEYS[1] lock key, KEYS[2] line, KEYS[3] places (see acquire.lua)
-- ARGV[1] owner token, ARGV[2] wake channel, ARGV[3] fence memory ms
-- Returns 1 released, 0 not held (the lock is free or expired), -1 another
-- owner holds it.
local token = ARGV[1]
local memory = tonumber(ARGV[3])

-- Takes the first waiter out of the line, keeps the lock for it until its
-- place ends, and wakes it; waiters whose place ended (or that have none)
-- are dropped on the way, at most 16. With none left, the lock is simply
-- free. `fence` is nil when the key is gone: then nothing is left behind
-- unless a waiter is woken.
local function wake_first(fence)
  local now
  for _ = 1, 16 do
    local first = redis.call('ZPOPMIN', KEYS[2])[1]
    if not first then
      break
    end
    local ends = tonumber(redis.call('ZSCORE', KEYS[3], first))
    redis.call('ZREM', KEYS[3], first)
    now = now or server_ms()
    if ends and ends > now then
      leave_released(KEYS[1], fence, math.max(memory, ends - now), first, ends)
      redis.call(PUBLISH, channel_of(ARGV[2], first), first)
      return
    end
  end
  if fence then
    leave_released(KEYS[1], fence, memory)
  end
end

local value = redis.call('GET', KEYS[1])
if value and not is_released(value) then
  if string.sub(value, 1, #token) ~= token then
    -- A waiter giving up while another owner holds the lock.
    redis.call('ZREM', KEYS[2], token)
    redis.call('ZREM', KEYS[3], token)
    return -1
  end
  if is_marked(value) then
    wake_first(fence_text(value))
  else
    -- Nobody was refused while it was held: nobody waits.
    leave_released(KEYS[1], fence_text(value), memory)
  end
  return 1
end
-- A waiter giving up, or a holder whose lease ended. The lock is free, and a
-- wake meant for this token may be lost with it: pass it on, unless the lock
-- is kept for another waiter.
redis.call('ZREM', KEYS[2], token)
redis.call('ZREM', KEYS[3], token)
local waiter, until_ms
if value then
  waiter, until_ms = promise(value)
end
if not waiter or waiter == token or until_ms <= server_ms() then
  wake_first(value and fence_text(value))
end
return 0
