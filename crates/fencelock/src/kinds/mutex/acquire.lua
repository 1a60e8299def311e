-- Takes a mutex if it is free. A refused waiter takes (or keeps) a place among
-- the lock's waiters, so that a release can offer it the lock in the same call
-- (release.lua), and marks the held value so that its release looks for
-- one.
-- KEYS[1] lock key, KEYS[2] places (zset: place member -> when the place ends,
-- server ms; the member is the token, lease and label: value.lua)
-- ARGV[1] owner token (ends with ':'), ARGV[2] lease ms,
-- ARGV[3] holder label ('' for none), ARGV[4] how long a place lasts without
-- an attempt, ms ('0': take no place, as where several masters each keep
-- their own line), ARGV[5] '1' when this token was refused before and may
-- have a place to give up, else '0', ARGV[6] '1' when the caller waits if
-- refused (a refusal then marks the held value, so that its release announces
-- itself), '0' for a single try
-- Returns {1, fence} when granted, {0, pttl} when held by another owner.
local token = ARGV[1]
local lease = tonumber(ARGV[2])
local place = tonumber(ARGV[4])
local refused_before = ARGV[5] == '1'
local waits = ARGV[6] == '1'
local member = token .. ARGV[2]
if ARGV[3] ~= '' then
  member = member .. ':' .. ARGV[3]
end

-- Refuses the attempt, which takes or renews its place.
local function refuse(value, pttl)
  if place > 0 then
    redis.call('ZADD', KEYS[2], server_ms() + place, member)
    -- Every place of one client lasts as long; a shorter one must not cut
    -- another client's longer place short. The set is given twice the place,
    -- so that the refusals of the next place's length find it long enough
    -- and send no PEXPIRE (a place past its end is skipped by its score).
    if redis.call('PTTL', KEYS[2]) < place then
      redis.call('PEXPIRE', KEYS[2], 2 * place)
    end
  end
  if waits and not is_marked(value) then
    redis.call('SET', KEYS[1], marked(value), 'KEEPTTL')
  end
  return {0, pttl}
end

local value = redis.call('GET', KEYS[1])
if value and not is_released(value) then
  if string.sub(value, 1, #token) == token then
    if is_offer(value) then
      -- The claim of an offer a release made to this waiter (which took its
      -- place out of the line): a plain hold from now on, for its lease.
      redis.call('SET', KEYS[1], claimed(value), 'PX', lease)
      return {1, tonumber(fence_text(value))}
    end
    -- Granted already: a retry of a grant whose reply was lost. Answered
    -- again, with a lease counted from now, so that the reply is as good as a
    -- fresh grant.
    if redis.call('PTTL', KEYS[1]) < lease then
      redis.call('PEXPIRE', KEYS[1], lease)
    end
    if refused_before then
      redis.call('ZREM', KEYS[2], member)
    end
    return {1, tonumber(fence_text(value))}
  end
  return refuse(value, redis.call('PTTL', KEYS[1]))
end

-- Free: released (its last fence left behind), or never held, or its lease
-- ended. A waiter that was refused before leaves its place; its grant is
-- marked, since others likely still wait.
if refused_before then
  redis.call('ZREM', KEYS[2], member)
end
local fence, text = fence_after(value and tonumber(fence_text(value)))
redis.call('SET', KEYS[1], held_value(token, text, refused_before, ARGV[3]), 'PX', lease)
return {1, fence}
