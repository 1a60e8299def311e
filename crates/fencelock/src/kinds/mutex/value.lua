-- The forms of a mutex key's value, shared by the scripts that read or write
-- one (a Mutex's, a MultiMutex's and a FairMutex's): prepended to them at
-- build time.
--   held      token .. fence [.. '+'] [.. ':' .. label]
--             '+' marks that a refused attempt waits, so that a release of a
--             value without it skips the waiters' bookkeeping
--   released  '~' .. fence
--             the name's last fence, kept for the fence memory after a release
--             so that the next grant's fence is higher without a second key
-- A waiter's place (a member of the places' sorted set, scored by when the
-- place ends) is its token, the lease it asks for and its label:
--   place     token .. lease_ms [.. ':' .. label]
-- so that a release can grant the lock to it, with its own lease and label,
-- in the same call.
-- Tokens end with ':' and never start with '~', so comparing a value's prefix
-- with a token never matches a released value or a longer token; labels hold
-- no ':'.

local function is_released(value)
  return string.sub(value, 1, 1) == '~'
end

-- The fence a value carries, held or released, as its decimal string.
local function fence_text(value)
  return string.match(value, '^~(%d+)') or string.match(value, '^[^:]*:(%d+)')
end

-- A place's member: the waiter's token, the lease it asks for and its label.
local function place_of(member)
  local token, lease, label = string.match(member, '^([^:]*:)(%d+):?(.*)$')
  return token, tonumber(lease), label or ''
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

-- Leaves the name's last fence behind a release, for `memory_ms`. A server
-- out of memory refuses the write: the lock is then deleted, as a release
-- must still free it, and the next fence comes from the server's clock alone.
local function leave_released(key, fence, memory_ms)
  local written = redis.pcall('SET', key, '~' .. (fence or '0'), 'PX', memory_ms)
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
  local t = server_time()
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Grants the lock under `key` to the first waiter of `next_waiter` whose client
-- still listens: a fresh fence after `fence` (nil when none is remembered),
-- the waiter's own lease and label, and the news on its client's own channel
-- of `wake`, the payload its token and the fence. `next_waiter()` gives the
-- next candidate's place member, or nil. A waiter whose client no longer
-- listens (PUBLISH reached nobody: its process is gone) is skipped at once.
-- Bounded: at most 16 candidates. Returns the lease granted (ms), or false
-- when nobody was.
local function hand_over(key, fence, wake, next_waiter)
  for _ = 1, 16 do
    local member = next_waiter()
    if not member then
      return false
    end
    local waiter, lease, label = place_of(member)
    if waiter and lease then
      local _, text = fence_after(fence and tonumber(fence))
      if redis.call(PUBLISH, channel_of(wake, waiter), waiter .. text) > 0 then
        redis.call('SET', key, held_value(waiter, text, true, label), 'PX', lease)
        return lease
      end
    end
  end
  return false
end
