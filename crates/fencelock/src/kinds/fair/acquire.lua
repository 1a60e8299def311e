-- Takes a fair lock if it is free, not kept for a woken waiter, and nobody
-- waits ahead of the caller; a refused waiter takes (or keeps) its place at
-- the back of the line.
-- KEYS[1] lock key, KEYS[2] line (zset: waiter token -> arrival number),
-- KEYS[3] places (zset: waiter token -> when its place ends, server ms); a
-- token is in both sets or in neither
-- ARGV[1] owner token (ends with ':'), ARGV[2] lease ms, ARGV[3] holder label
-- ('' for none), ARGV[4] how long a place lasts without an attempt, ms ('0':
-- take no place, as try_lock), ARGV[5] wake channel
-- Returns {1, fence} when granted; {0, ms} when refused: ms the holder's lease
-- has left, or, when the lock is free but kept for a woken waiter or another
-- waiter is first, until that waiter's place ends unless it claims the lock.
-- Value forms: mutex/value.lua; a release keeps the lock for the first waiter
-- it wakes until that waiter's place ends.
local token = ARGV[1]
local lease = tonumber(ARGV[2])
local place = tonumber(ARGV[4])
-- How many waiters whose place ended one call drops from the head of the line.
local DROPS = 16

-- The server's clock, read once and only when needed: an uncontended grant
-- reads it once, for its fence.
local now
local function clock()
  now = now or server_ms()
  return now
end

-- Refuses the attempt, which takes or renews its place; `wait_ms` is how long
-- the lock stays out of the caller's reach, for its fallback timer.
local function refuse(wait_ms)
  if place > 0 then
    if redis.call('ZADD', KEYS[3], clock() + place, token) == 1 then
      -- No place yet (a newcomer, or a waiter whose place ended): the back of
      -- the line.
      local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
      redis.call('ZADD', KEYS[2], (tonumber(last) or 0) + 1, token)
    end
    -- Both sets live as long as the place that ends last. Both always get the
    -- same expiry, so one tells it. Clients with other fallbacks take places
    -- of other lengths: a shorter place must not cut a longer one short.
    if redis.call('PTTL', KEYS[3]) < place then
      redis.call('PEXPIRE', KEYS[2], place)
      redis.call('PEXPIRE', KEYS[3], place)
    end
  end
  return {0, wait_ms}
end

-- The first waiter in line whose place has not ended, and when its place
-- ends (nil for the caller itself); waiters whose place ended (or that have
-- none) are dropped on the way, and `dropped` tells whether any was. When
-- the call dropped as many as it may, the head is unknown and `blocked` is
-- true: the caller is refused for a millisecond and its next attempt goes on.
local function first_in_line()
  local dropped = false
  for _ = 1, DROPS do
    local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if not first or first == token then
      return first, nil, dropped
    end
    local ends = tonumber(redis.call('ZSCORE', KEYS[3], first))
    if ends and ends > clock() then
      return first, ends, dropped
    end
    redis.call('ZREM', KEYS[2], first)
    redis.call('ZREM', KEYS[3], first)
    dropped = true
  end
  return nil, nil, dropped, true
end

local function grant(value, waited)
  local fence, text = fence_after(value and tonumber(fence_text(value)))
  redis.call('SET', KEYS[1], held_value(token, text, waited, ARGV[3]), 'PX', lease)
  return {1, fence}
end

local value = redis.call('GET', KEYS[1])
if value and not is_released(value) then
  if string.sub(value, 1, #token) == token then
    -- A retry of a grant whose reply was lost: answer it again.
    if redis.call('PTTL', KEYS[1]) < lease then
      redis.call('PEXPIRE', KEYS[1], lease)
    end
    return {1, tonumber(fence_text(value))}
  end
  local pttl = redis.call('PTTL', KEYS[1])
  if place > 0 and not is_marked(value) then
    -- So that the holder's release looks for the line.
    redis.call('SET', KEYS[1], marked(value), 'KEEPTTL')
  end
  return refuse(pttl)
end

-- Free. A release that woke the first waiter keeps the lock for it (it left
-- the line then); a grant that came through the line is marked, since others
-- likely wait behind.
local waiter, until_ms
if value then
  waiter, until_ms = promise(value)
end
if waiter == token then
  return grant(value, true)
end
if waiter and until_ms > clock() then
  return refuse(until_ms - now)
end
local first, first_until, dropped, blocked = first_in_line()
if blocked then
  return refuse(1)
end
if first and first ~= token then
  if dropped then
    -- The lock is free and the line moved up without a release to announce
    -- it: wake the new first waiter.
    redis.call(PUBLISH, channel_of(ARGV[5], first), first)
  end
  return refuse(first_until - now)
end
if first then
  redis.call('ZREM', KEYS[2], token)
  redis.call('ZREM', KEYS[3], token)
end
return grant(value, first ~= nil)
