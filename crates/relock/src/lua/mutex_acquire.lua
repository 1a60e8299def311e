-- Takes a mutex if it is free and not promised to a woken waiter. A refused
-- waiter takes (or keeps) a place among the lock's waiters, so that a release
-- can wake one of them by name instead of one in every waiting process.
-- KEYS[1] lock key, KEYS[2] fence key, KEYS[3] waiters (zset: waiter token ->
-- when its place ends, server ms), KEYS[4] line (zset: waiter token -> when it
-- first waited, server ms), KEYS[5] hand-off (the token of the waiter a
-- release woke, for as long as the lock is kept for it)
-- ARGV[1] owner token (ends with ':'), ARGV[2] lease ms,
-- ARGV[3] fence memory ms (beyond the lease), ARGV[4] holder label ('' for none),
-- ARGV[5] how long a place lasts without an attempt, ms ('0': take no place,
-- as try_lock), ARGV[6] '1' when this token was refused before and may have a
-- place to give up, else '0'
-- Returns {1, fence} when granted, {0, pttl} when held by another owner or
-- kept for a woken waiter (pttl: until the lease or the hand-off ends).
-- The stored value is token .. fence [.. ':' .. label].
local token = ARGV[1]

local function leave_waiters()
  if ARGV[6] == '1' then
    redis.call('ZREM', KEYS[3], token)
    redis.call('ZREM', KEYS[4], token)
  end
end

-- The list outlives its longest place; GT cannot set a first expiry.
local function outlive(key, place)
  if redis.call('PEXPIRE', key, place, 'GT') == 0 then
    redis.call('PEXPIRE', key, place, 'NX')
  end
end

-- Refuses the attempt, which takes or renews its place; the line keeps when
-- the waiter first waited, so that one refused after a wake is still the
-- first to be woken, instead of going to the back.
local function refuse(pttl)
  local place = tonumber(ARGV[5])
  if place > 0 then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('ZADD', KEYS[3], now + place, token)
    redis.call('ZADD', KEYS[4], 'NX', now, token)
    outlive(KEYS[3], place)
    outlive(KEYS[4], place)
  end
  return {0, pttl}
end

local held = redis.call('GET', KEYS[1])
if held then
  if string.sub(held, 1, #token) == token then
    -- A retry of a grant whose reply was lost: answer it again, so retries
    -- after connection errors are idempotent.
    if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
    end
    leave_waiters()
    return {1, tonumber(string.match(held, '^[^:]*:(%d+)'))}
  end
  return refuse(redis.call('PTTL', KEYS[1]))
end
-- A free lock whose release woke a waiter is kept for that waiter a moment:
-- otherwise a task that asks again right after its release takes it first,
-- every time, and the waiters never get their turn.
local promised = redis.call('GET', KEYS[5])
if promised and promised ~= token then
  return refuse(redis.call('PTTL', KEYS[5]))
end
if promised then
  redis.call('DEL', KEYS[5])
end
leave_waiters()
local fence, text = next_fence(KEYS[2], tonumber(ARGV[2]) + tonumber(ARGV[3]))
local value = token .. text
if ARGV[4] ~= '' then
  value = value .. ':' .. ARGV[4]
end
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
return {1, fence}
