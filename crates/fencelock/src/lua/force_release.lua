-- An operator's release of every lock held under one name, whoever holds it.
-- KEYS[1] mutex key, KEYS[2] reentrant mutex hash, KEYS[3] read-write lock
-- hash, KEYS[4] semaphore hash, KEYS[5] fair mutex key, KEYS[6] fair line,
-- KEYS[7] fair places
-- ARGV[1..6] wake channels: mutex, reentrant mutex, read-write readers,
-- read-write writers, semaphore, fair mutex; ARGV[7] fence memory ms
-- Returns what it found before removing it: {server ms, mutex value or false,
-- mutex pttl, reentrant fields (flat), reentrant pttl, read-write fields,
-- semaphore fields, fair value or false, fair pttl, fair waiters with a live
-- place}. A mutex's value forms: mutex_value.lua.
-- Holds are removed; what waiters keep is not: a fair mutex's line, a
-- read-write lock's waiting writers, a semaphore's total. The fence key is
-- never touched, and a mutex leaves its fence behind, so fences keep rising. A key of another type than its kind
-- uses is none of ours and is left alone.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function of_type(key, wanted)
  return redis.call('TYPE', key)['ok'] == wanted
end

local function absent_or(key, wanted)
  local found = redis.call('TYPE', key)['ok']
  return found == wanted or found == 'none'
end

-- Deletes the fields for which `is_hold` is true; returns every field read.
local function take_fields(key, is_hold)
  if not of_type(key, 'hash') then
    return {}, 0
  end
  local flat = redis.call('HGETALL', key)
  local removed = 0
  for i = 1, #flat, 2 do
    if is_hold(flat[i]) then
      redis.call('HDEL', key, flat[i])
      removed = removed + 1
    end
  end
  return flat, removed
end

-- A held mutex leaves its fence behind, as a release does; a released one is
-- not held and stays as it is.
local mutex_value, mutex_pttl = false, -2
if of_type(KEYS[1], 'string') then
  local value = redis.call('GET', KEYS[1])
  if not is_released(value) then
    mutex_value, mutex_pttl = value, redis.call('PTTL', KEYS[1])
    leave_released(KEYS[1], fence_text(value), tonumber(ARGV[7]))
    redis.call(PUBLISH, ARGV[1], '')
  end
end

local reentrant, reentrant_pttl = {}, -2
if of_type(KEYS[2], 'hash') then
  reentrant = redis.call('HGETALL', KEYS[2])
  reentrant_pttl = redis.call('PTTL', KEYS[2])
  redis.call('DEL', KEYS[2])
  redis.call(PUBLISH, ARGV[2], '')
end

local rw, rw_removed = take_fields(KEYS[3], function(field)
  return string.match(field, '^[rw][^:]*:') ~= nil
    or field == 'fence-r' or field == 'fence-w'
end)
if rw_removed > 0 then
  redis.call(PUBLISH, ARGV[3], '*')
  redis.call(PUBLISH, ARGV[4], '')
end

local sem, sem_removed = take_fields(KEYS[4], function(field)
  return string.match(field, '^[^:]+:%d+$') ~= nil
    or string.match(field, '^l:[^:]+:%d+$') ~= nil
end)
if sem_removed > 0 then
  local total = redis.call('HGET', KEYS[4], 'permits')
  redis.call(PUBLISH, ARGV[5], total or '*')
end

local fair_value, fair_pttl = false, -2
local queued = 0
local fair = of_type(KEYS[5], 'string') and redis.call('GET', KEYS[5])
if fair and not is_released(fair) then
  -- As a release, it leaves the fence behind; a released value (the fence, or
  -- the lock kept for a woken waiter) is not held and stays as it is.
  fair_value, fair_pttl = fair, redis.call('PTTL', KEYS[5])
  leave_released(KEYS[5], fence_text(fair), tonumber(ARGV[7]))
  if absent_or(KEYS[6], 'zset') and absent_or(KEYS[7], 'zset') then
    -- The head of the line is woken, as by a release; waiters that stopped
    -- trying are dropped first so that the wake-up reaches a live one.
    local gone = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', now)
    for _, waiter in ipairs(gone) do
      redis.call('ZREM', KEYS[6], waiter)
      redis.call('ZREM', KEYS[7], waiter)
    end
    queued = redis.call('ZCARD', KEYS[7])
    local first = redis.call('ZRANGE', KEYS[6], 0, 0)[1]
    if first then
      redis.call(PUBLISH, channel_of(ARGV[6], first), first)
    end
  end
end

return {now, mutex_value, mutex_pttl, reentrant, reentrant_pttl, rw, sem,
  fair_value, fair_pttl, queued}
