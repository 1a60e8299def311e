-- Releases a mutex if the caller owns it, leaving the name's last fence behind
-- (value.lua), or gives up the caller's place among the waiters. When someone
-- waits, the lock goes at once to the waiter whose place ends first (the one
-- that took or renewed it the longest ago) and whose client still listens:
-- granted in this call, with a fresh fence and the waiter's own lease, and
-- announced on that waiter's client's own channel, so that its acquire
-- completes on the message.
-- KEYS[1] lock key, KEYS[2] places (see acquire.lua)
-- ARGV[1] owner token, ARGV[2] wake channel, ARGV[3] fence memory ms,
-- ARGV[4] the caller's place member (its token, lease and label)
-- Returns 1 released, 0 the caller does not hold it and it is free, -1 another
-- owner holds it.
local token = ARGV[1]
local memory = tonumber(ARGV[3])

-- The next waiter by the end of its place, dropping those whose place ended
-- (they stopped trying) and the caller's own; bounded, as each pass drops one.
local now
local function next_waiter()
  for _ = 1, 16 do
    local first = redis.call('ZPOPMIN', KEYS[2])
    if #first == 0 then
      return nil
    end
    now = now or server_ms()
    if tonumber(first[2]) > now and first[1] ~= ARGV[4] then
      return first[1]
    end
  end
end

local value = redis.call('GET', KEYS[1])
if value and not is_released(value) then
  if string.sub(value, 1, #token) ~= token then
    -- A waiter giving up while another owner holds the lock.
    redis.call('ZREM', KEYS[2], ARGV[4])
    return -1
  end
  local fence = fence_text(value)
  if not is_marked(value) then
    leave_released(KEYS[1], fence, memory)
  elseif not hand_over(KEYS[1], fence, ARGV[2], next_waiter) then
    -- Nobody with a place: wake one waiter in each listening process (waiters
    -- without a place: a multi-lock's, or any where several masters keep no
    -- line), named by this release's token so that a waiter hearing it from
    -- several masters counts it once.
    leave_released(KEYS[1], fence, memory)
    redis.call(PUBLISH, ARGV[2], '~' .. token)
  end
  return 1
end
-- A waiter giving up, or a holder whose lease ended. The lock is free: it goes
-- to the next waiter, if one waits, which would otherwise wait for its next
-- try.
redis.call('ZREM', KEYS[2], ARGV[4])
hand_over(KEYS[1], value and fence_text(value), ARGV[2], next_waiter)
return 0
