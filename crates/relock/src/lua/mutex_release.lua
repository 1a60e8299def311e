-- Releases a mutex if the caller owns it, or gives up the caller's place among
-- the waiters; then, if the lock is free, wakes one waiter.
-- KEYS[1] lock key, KEYS[2] waiters, KEYS[3] line, KEYS[4] hand-off (see
-- mutex_acquire.lua)
-- ARGV[1] owner token, ARGV[2] wake channel, ARGV[3] announcement: '' to wake
-- the first waiter in line whose place has not ended; on RedLock, where no
-- master keeps places, '~' and the token, so that waiters hearing it from
-- several masters count it once; ARGV[4] how long the lock is kept for the
-- woken waiter, ms
-- Returns 1 released, 0 the key is gone, -1 another owner holds it.
local token = ARGV[1]

-- Wakes the first waiter in line whose place has not ended, by its token, and
-- keeps the lock for it for ARGV[4] ms. It takes the waiter's place but not its
-- turn: refused again, it takes a new place and is still first; gone, it is not
-- woken again. Waiters whose place ended leave the line. With none, wakes one
-- waiter in each process (waiters without a place: a multi-lock's).
local function wake_next()
  if ARGV[3] ~= '' then
    redis.call(PUBLISH, ARGV[2], ARGV[3])
    return
  end
  local now
  -- Bounded: each pass removes one waiter from the line, or wakes one.
  for _ = 1, 16 do
    local first = redis.call('ZRANGE', KEYS[3], 0, 0)
    if #first == 0 then
      break
    end
    local waiter = first[1]
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local ends = tonumber(redis.call('ZSCORE', KEYS[2], waiter))
    redis.call('ZREM', KEYS[2], waiter)
    if waiter ~= token and ends and ends > now then
      redis.call('SET', KEYS[4], waiter, 'PX', ARGV[4])
      redis.call(PUBLISH, ARGV[2], waiter)
      return
    end
    redis.call('ZREM', KEYS[3], waiter)
  end
  redis.call(PUBLISH, ARGV[2], '')
end

-- A waiter giving up: it no longer wants a wake, nor its turn.
local function leave_waiters()
  redis.call('ZREM', KEYS[2], token)
  redis.call('ZREM', KEYS[3], token)
end

local held = redis.call('GET', KEYS[1])
if held and string.sub(held, 1, #token) ~= token then
  leave_waiters()
  return -1
end
if not held then
  -- A waiter giving up, or a holder whose lease ended. The lock is free, and a
  -- wake meant for this token may be lost with it: pass it on. (On RedLock a
  -- refused attempt releases every master; waking there would wake a waiter
  -- per refusal.)
  leave_waiters()
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
