-- The forms of a mutex key's value, shared by the scripts that read or write
-- one (a Mutex's, a MultiMutex's and a FairMutex's): prepended to them at
-- build time.
--   held      token .. fence [.. '+'] [.. ':' .. label]
--             '+' marks that a refused attempt waits, so that a release of a
--             value without it skips the waiters' bookkeeping
--   released  '~' .. fence [.. '>' .. until .. '>' .. waiter]
--             the name's last fence, kept for the fence memory after a release
--             so that the next grant's fence is higher without a second key;
--             with a waiter, the lock is kept for that woken waiter until
--             `until` (server ms)
-- Tokens end with ':' and never start with '~', so comparing a value's prefix
-- with a token never matches a released value or a longer token.

local function is_released(value)
  return string.sub(value, 1, 1) == '~'
end

-- The fence a value carries, held or released, as its decimal string.
local function fence_text(value)
  return string.match(value, '^~(%d+)') or string.match(value, '^[^:]*:(%d+)')
end

-- For a released value kept for a woken waiter: that waiter and until when.
local function promise(value)
  local until_ms, waiter = string.match(value, '^~%d+>(%d+)>(.+)$')
  if waiter then
    return waiter, tonumber(until_ms)
  end
end

local function is_marked(value)
  return string.match(value, '^[^:]*:%d+%+') ~= nil
end

-- A held value with the mark that someone waits.
local function marked(value)
  return (string.gsub(value, '^([^:]*:%d+)', '%1+', 1))
end

local function held_value(token, fence, waited, label)
  local value = token .. fence
  if waited then
    value = value .. '+'
  end
  if label ~= '' then
    value = value .. ':' .. label
  end
  return value
end

-- Leaves the name's last fence behind a release, for `memory_ms`; kept for
-- `waiter` until `until_ms` when one is given. A server out of memory refuses
-- the write: the lock is then deleted, as a release must still free it, and
-- the next fence comes from the server's clock alone.
local function leave_released(key, fence, memory_ms, waiter, until_ms)
  local value = '~' .. (fence or '0')
  if waiter then
    value = value .. '>' .. string.format('%.0f', until_ms) .. '>' .. waiter
  end
  local written = redis.pcall('SET', key, value, 'PX', memory_ms)
  if type(written) == 'table' and written.err then
    redis.call('DEL', key)
  end
end

-- Where a woken waiter's client listens: the wake channel `base` and the
-- client tag its token starts with (`<tag>.<random>:`), so that the message
-- reaches that client alone; `base` itself for a token without one.
local function channel_of(base, waiter)
  local client = string.match(waiter, '^([^.:]+)%.')
  if client then
    return base .. ':' .. client
  end
  return base
end

local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
