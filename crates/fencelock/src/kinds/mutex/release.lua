-- Releases a mutex if the caller owns it, leaving the name's last fence behind
-- (value.lua), or gives up the caller's place among the waiters. When someone
-- waits, the lock is offered at once to the waiter whose place ends first (the
-- one that took or renewed it the longest ago) and whose client still listens
-- (hand_over, value.lua): its acquire claims it.
-- KEYS[1] lock key, KEYS[2] places (see acquire.lua)
-- ARGV[1] owner token, ARGV[2] wake channel, ARGV[3] fence memory ms,
-- ARGV[4] the caller's place member (its token, lease and label), ARGV[5] the
-- handoff window ms
-- Returns 1 released, 0 the caller does not hold it and it is free, -1 another
-- owner holds it.
local token = ARGV[1]
local memory = tonumber(ARGV[3])
local window = tonumber(ARGV[5])
local line = places_line(KEYS[2], ARGV[4], false)

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
    return 1
  end
  local handed, last = hand_over(KEYS[1], fence, ARGV[2], line, window)
  if not handed then
    -- Nobody with a place: wake one waiter in each listening process (waiters
    -- without a place: a multi-lock's, or any where several masters keep no
    -- line), named by this release's token so that a waiter hearing it from
    -- several masters counts it once.
    leave_released(KEYS[1], last, memory)
    redis.call(PUBLISH, ARGV[2], '~' .. token)
  end
  return 1
end
-- A waiter giving up, or a holder whose lease ended. The lock is free: it is
-- offered to the next waiter, if one waits, which would otherwise wait for its
-- next try.
redis.call('ZREM', KEYS[2], ARGV[4])
local found = value and fence_text(value)
local handed, last = hand_over(KEYS[1], found, ARGV[2], line, window)
if not handed and last ~= found then
  -- Offers were written that nobody heard: the last fence drawn stays behind.
  leave_released(KEYS[1], last, memory)
end
return 0
