-- Takes a fair lock if it is free and nobody waits ahead of the caller; a
-- refused waiter takes (or keeps) its place at the back of the line. A lock
-- found free with waiters ahead (its holder's lease ended without a release)
-- is offered to the first of them, as a release offers it.
-- KEYS[1] lock key, KEYS[2] line (zset: place member -> arrival number),
-- KEYS[3] places (zset: place member -> when the place ends, server ms); a
-- member is in both sets or in neither, and is the waiter's token, lease and
-- label (value/value.lua)
-- ARGV[1] owner token (ends with ':'), ARGV[2] lease ms, ARGV[3] holder label
-- ('' for none), ARGV[4] how long a place lasts without an attempt, ms ('0':
-- take no place, as try_lock), ARGV[5] wake channel, ARGV[6] the handoff window
-- ms
-- Returns {1, fence} when granted; {0, ms} when refused: ms the holder's lease
-- (or an offer) has left, or 1 when the line could not be read to its head in
-- one call.
local token = ARGV[1]
local lease = tonumber(ARGV[2])
local place = tonumber(ARGV[4])
local member = token .. ARGV[2]
if ARGV[3] ~= '' then
  member = member .. ':' .. ARGV[3]
end
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
    local ends = tonumber(redis.call('ZSCORE', KEYS[3], member))
    if ends and ends <= clock() then
      -- Its place ended (it stopped trying for longer than a place lasts),
      -- though nobody dropped it yet: it has lost its turn.
      redis.call('ZREM', KEYS[2], member)
      ends = nil
    end
    redis.call('ZADD', KEYS[3], clock() + place, member)
    if not ends then
      -- No place yet (a newcomer, or a waiter whose place ended): the back of
      -- the line.
      local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
      redis.call('ZADD', KEYS[2], (tonumber(last) or 0) + 1, member)
    end
    -- Both sets live at least as long as the place that ends last. Both always
    -- get the same expiry, so one tells it. Clients with other fallbacks take
    -- places of other lengths: a shorter place must not cut a longer one
    -- short. They get twice the place, so that the refusals of the next
    -- place's length find them long enough and send no PEXPIRE (a place past
    -- its end is dropped by its score).
    if redis.call('PTTL', KEYS[3]) < place then
      redis.call('PEXPIRE', KEYS[2], 2 * place)
      redis.call('PEXPIRE', KEYS[3], 2 * place)
    end
  end
  return {0, wait_ms}
end

local function leave_line()
  redis.call('ZREM', KEYS[2], member)
  redis.call('ZREM', KEYS[3], member)
end

local value = redis.call('GET', KEYS[1])
if value and not is_released(value) then
  if string.sub(value, 1, #token) == token then
    if is_offer(value) then
      -- The claim of an offer a release made to this waiter (which took it
      -- out of the line): a plain hold from now on, for its lease.
      redis.call('SET', KEYS[1], claimed(value), 'PX', lease)
    elseif redis.call('PTTL', KEYS[1]) < lease then
      -- Granted already: a retry of a grant whose reply was lost, answered
      -- again with a lease counted from now.
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

-- Free. Waiters ahead of the caller come first: the lock is offered to the
-- first of them, as a release offers it.
local fence = value and fence_text(value)
local ahead = fair_line(KEYS[2], KEYS[3], member)
local handed = hand_over(KEYS[1], fence, ARGV[5], ahead, tonumber(ARGV[6]))
if handed then
  return refuse(handed)
end
if ahead.blocked then
  return refuse(1)
end
local waited = redis.call('ZSCORE', KEYS[3], member) ~= false
if waited then
  leave_line()
end
local granted, text = fence_after(fence and tonumber(fence))
redis.call('SET', KEYS[1], held_value(token, text, waited, ARGV[3]), 'PX', lease)
return {1, granted}
