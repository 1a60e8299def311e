-- Takes a fair lock if it is free and nobody waits ahead of the caller; a
-- refused waiter takes (or keeps) its place at the back of the line.
-- KEYS[1] lock key, KEYS[2] line (zset: waiter token -> arrival number),
-- KEYS[3] places (zset: waiter token -> expiry of its place, server ms),
-- KEYS[4] fence key
-- ARGV[1] owner token (ends with ':'), ARGV[2] lease ms,
-- ARGV[3] fence memory ms (beyond the lease), ARGV[4] holder label ('' for
-- none), ARGV[5] how long a place lasts without an attempt, ms ('0': take no
-- place, as try_lock), ARGV[6] wake channel
-- Returns {1, fence} when granted; {0, ms} when refused: ms the holder's lease
-- has left, or, when the lock is free but another waiter is first, until that
-- waiter's place ends unless it claims the lock.
-- The lock's value is token .. fence [.. ':' .. label], as a Mutex's.
local token = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Waiters that stopped trying (dead, or gone without a word) lose their place,
-- by the server's clock.
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, waiter in ipairs(gone) do
  redis.call('ZREM', KEYS[2], waiter)
  redis.call('ZREM', KEYS[3], waiter)
end

local function take_place()
  local place = tonumber(ARGV[5])
  if place <= 0 then
    return
  end
  if not redis.call('ZSCORE', KEYS[2], token) then
    local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
    local arrival = 1
    if last[2] then
      arrival = tonumber(last[2]) + 1
    end
    redis.call('ZADD', KEYS[2], arrival, token)
  end
  redis.call('ZADD', KEYS[3], now + place, token)
  for i = 2, 3 do
    if redis.call('PTTL', KEYS[i]) < place then
      redis.call('PEXPIRE', KEYS[i], place)
    end
  end
end

local function leave_line()
  redis.call('ZREM', KEYS[2], token)
  redis.call('ZREM', KEYS[3], token)
end

local held = redis.call('GET', KEYS[1])
if held then
  if string.sub(held, 1, #token) == token then
    -- A retry of a grant whose reply was lost: answer it again.
    if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
    end
    leave_line()
    return {1, tonumber(string.match(held, '^[^:]*:(%d+)'))}
  end
  take_place()
  return {0, redis.call('PTTL', KEYS[1])}
end

-- The first in line; one without a place (an inconsistent line) is dropped.
local first, first_until
for _ = 1, redis.call('ZCARD', KEYS[2]) do
  first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  first_until = first and tonumber(redis.call('ZSCORE', KEYS[3], first))
  if not first or first_until then
    break
  end
  redis.call('ZREM', KEYS[2], first)
  first = nil
end

if first and first ~= token then
  take_place()
  if #gone > 0 then
    -- The lock is free and the line moved up without a release to announce
    -- it: wake the new first waiter.
    redis.call(PUBLISH, ARGV[6], first)
  end
  return {0, math.max(first_until - now, 1)}
end

leave_line()
local fence, text = next_fence(KEYS[4], tonumber(ARGV[2]) + tonumber(ARGV[3]))
local value = token .. text
if ARGV[4] ~= '' then
  value = value .. ':' .. ARGV[4]
end
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
return {1, fence}
