-- Releases a mutex if the caller owns it, or gives up the caller's place among
-- the waiters; then, if the lock is free, wakes one waiter.
-- KEYS[1] lock key, KEYS[2] waiters (see mutex_acquire.lua)
-- ARGV[1] owner token, ARGV[2] wake channel, ARGV[3] announcement: '' to wake
-- the waiter whose place ends first (each refusal renews a place, so that is
-- the one that has waited longest since its last attempt); on RedLock, where
-- no master keeps places, '~' and the token, so that waiters hearing it from
-- several masters count it once
-- Returns 1 released, 0 the key is gone, -1 another owner holds it.
local token = ARGV[1]

-- Wakes the first waiter whose place has not ended, by its token; with none,
-- wakes one waiter in each process (waiters without a place: a multi-lock's).
local function wake_next()
  if ARGV[3] ~= '' then
    redis.call(PUBLISH, ARGV[2], ARGV[3])
    return
  end
  local now
  -- Bounded: each pass removes one place, and only ended places are skipped.
  for _ = 1, 16 do
    local first = redis.call('ZPOPMIN', KEYS[2])
    if #first == 0 then
      break
    end
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    if first[1] ~= token and tonumber(first[2]) > now then
      redis.call(PUBLISH, ARGV[2], first[1])
      return
    end
  end
  redis.call(PUBLISH, ARGV[2], '')
end

local held = redis.call('GET', KEYS[1])
if held and string.sub(held, 1, #token) ~= token then
  -- A waiter giving up: it no longer wants a wake.
  redis.call('ZREM', KEYS[2], token)
  return -1
end
if not held then
  -- A waiter giving up, or a holder whose lease ended. The lock is free, and a
  -- wake meant for this token may be lost with it: pass it on. (On RedLock a
  -- refused attempt releases every master; waking there would wake a waiter
  -- per refusal.)
  redis.call('ZREM', KEYS[2], token)
  if ARGV[3] == '' then
    wake_next()
  end
  return 0
end
-- Wake first: a waiters key of another type fails the script here, before the
-- lock is freed, so an error never reports a release that happened.
wake_next()
redis.call('DEL', KEYS[1])
return 1
