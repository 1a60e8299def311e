-- Takes a mutex if it is free and not kept for a woken waiter. A refused
-- waiter takes (or keeps) a place among the lock's waiters, so that a release
-- can wake one of them by name instead of one in every waiting process, and
-- marks the held value so that its release looks for one.
-- KEYS[1] lock key, KEYS[2] waiters (zset: waiter token -> when its place
-- ends, server ms)
-- ARGV[1] owner token (ends with ':'), ARGV[2] lease ms,
-- ARGV[3] fence memory ms (beyond the lease), ARGV[4] holder label ('' for none),
-- ARGV[5] how long a place lasts without an attempt, ms ('0': take no place,
-- as where several masters each keep their own line), ARGV[6] '1' when this
-- token was refused before and may have a place to give up, else '0',
-- ARGV[7] '1' when the caller waits if refused (a refusal then marks the held
-- value, so that its release announces itself), '0' for a single try
-- Returns {1, fence} when granted, {0, pttl} when held by another owner or
-- kept for a woken waiter (pttl: until the lease or the hand-off ends).
-- Value forms: value.lua.
local token = ARGV[1]
local lease = tonumber(ARGV[2])
local place = tonumber(ARGV[5])
local refused_before = ARGV[6] == '1'
local waits = ARGV[7] == '1'

-- Refuses the attempt, which takes or renews its place.
local function refuse(value, pttl, now)
  if place > 0 then
    redis.call('ZADD', KEYS[2], (now or server_ms()) + place, token)
    -- Every place lasts as long, so the latest one ends last: the set lives
    -- as long as its last place.
    redis.call('PEXPIRE', KEYS[2], place)
  end
  if waits and not is_released(value) and not is_marked(value) then
    redis.call('SET', KEYS[1], marked(value), 'KEEPTTL')
  end
  return {0, pttl}
end

local value = redis.call('GET', KEYS[1])
if value and not is_released(value) then
  if string.sub(value, 1, #token) == token then
    -- A retry of a grant whose reply was lost: answer it again, so retries
    -- after connection errors are idempotent.
    if redis.call('PTTL', KEYS[1]) < lease then
      redis.call('PEXPIRE', KEYS[1], lease)
    end
    if refused_before then
      redis.call('ZREM', KEYS[2], token)
    end
    return {1, tonumber(fence_text(value))}
  end
  return refuse(value, redis.call('PTTL', KEYS[1]))
end

-- Free. A lock whose release woke a waiter is kept for that waiter a moment:
-- otherwise a task that asks again right after its release takes it first,
-- every time, and the waiters never get their turn.
local waiter, until_ms
if value then
  waiter, until_ms = promise(value)
  if waiter and waiter ~= token then
    local now = server_ms()
    if until_ms > now then
      return refuse(value, until_ms - now, now)
    end
  end
end
-- The release that woke this waiter took its place already; a waiter that
-- was refused before leaves its place.
if refused_before and waiter ~= token then
  redis.call('ZREM', KEYS[2], token)
end
local fence, text = fence_after(value and tonumber(fence_text(value)))
-- A grant that came after a wait, or after a hand-off, marks its value: other
-- waiters are likely still there, and its release then looks for them.
local waited = refused_before or waiter ~= nil
redis.call('SET', KEYS[1], held_value(token, text, waited, ARGV[4]), 'PX', lease)
return {1, fence}
