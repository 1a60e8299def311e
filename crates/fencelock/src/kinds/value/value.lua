-- The forms of a mutex key's value, shared by the scripts that read or write
-- one (a Mutex's, a MultiMutex's and a FairMutex's): prepended to them at
-- build time.
--   held      token .. fence [.. '+'] [.. ':' .. label]
--             '+' marks that a refused attempt waits, so that a release of a
--             value without it skips the waiters' bookkeeping
--   offered   token .. fence .. '+?' [.. ':' .. label]
--             written by a release for the waiter with that token, which has
--             not claimed it yet (hand_over below): held by that waiter, but
--             not renewed or extended until its claim makes it a plain hold
--   released  '~' .. fence
--             the name's last fence, kept for the fence memory after a release
--             so that the next grant's fence is higher without a second key
-- A waiter's place (a member of the places' sorted set, scored by when the
-- place ends) is its token, the lease it asks for and its label:
--   place     token .. lease_ms [.. ':' .. label]
-- so that a release can offer the lock to it, with its own label, in the same
-- call.
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

-- Whether a held value is an offer its waiter has not claimed yet.
local function is_offer(value)
  return string.match(value, '^[^:]*:%d+%+%?') ~= nil
end

-- An offered value as its waiter holds it once claimed.
local function claimed(value)
  return (string.gsub(value, '^([^:]*:%d+%+)%?', '%1', 1))
end

-- A held value with the mark that someone waits.
local function marked(value)
  return (string.gsub(value, '^([^:]*:%d+)', '%1+', 1))
end

local function held_value(token, fence, waited, label, offered)
  local value = token .. fence
  if waited then
    value = value .. '+'
  end
  if offered then
    value = value .. '?'
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

-- A release hands the lock over by an offer, not a grant for the waiter's
-- lease: the waiter's value, marked offered, written with an expiry of the
-- handoff window (or the waiter's lease, if shorter). The waiter claims it by
-- asking again with its token: acquire.lua finds its own token and makes the
-- value a plain hold for its lease, and the waiter's guard counts its validity
-- from that claim's send. Until then no renewal or extension lengthens it: a
-- renewal of the same token still on its way from a hold that ended (a place
-- left behind by a reply that was lost) cannot turn an offer nobody claims
-- into a lease. The
-- message that tells the waiter is a wake-up and never proof: a stale one, a
-- duplicate or one a replica passed on costs the waiter one request, which
-- Redis answers by what it holds. An offer nobody claims (the waiter's process
-- stopped, its connection half-open, the message lost) ends with the window.
--
-- A line of waiters, as hand_over reads it:
--   take()        the next candidate's place member, taken out of the line,
--                 or nil when nobody with a live place is left
--   peek()        the candidate after it, left in the line, or nil
--   skip_unheard  whether a candidate whose client heard nothing is passed
--                 over (a Mutex's line: its process is most likely gone) or
--                 offered the lock anyway (a FairMutex's, whose order a client
--                 reconnecting its pub/sub connection keeps)

-- The longest lease a client asks for: 365 days.
local MAX_LEASE_MS = 31536000000

-- Offers the lock under `key` to the first waiter of `line` whose client still
-- listens (or, for a line that skips none, to the first): its token, a fresh
-- fence after `fence` (nil when none is remembered), its label, and an expiry
-- of `window` ms or its lease, the shorter. The offer is written first, then
-- announced on the waiter's client's own channel of `wake`, the payload its
-- token; the waiter after it is told `<token>?<ms>`, so that it asks again
-- once the offer has had its time. A place whose lease is no number of
-- milliseconds in range (a hand-written member, another version's) is dropped.
-- Bounded: at most 16 candidates. Returns the offer's expiry (ms), or false
-- when nobody was offered the lock; and the last fence written, or `fence`.
local function hand_over(key, fence, wake, line, window)
  for _ = 1, 16 do
    local member = line.take()
    if not member then
      return false, fence
    end
    local waiter, lease, label = place_of(member)
    if waiter and lease and lease >= 1 and lease <= MAX_LEASE_MS then
      local _, text = fence_after(fence and tonumber(fence))
      fence = text
      local offer = math.min(lease, window)
      redis.call('SET', key, held_value(waiter, text, true, label, true), 'PX', offer)
      if redis.call(PUBLISH, channel_of(wake, waiter), waiter) > 0 or not line.skip_unheard then
        local after = line.peek()
        local behind = after and place_of(after)
        if behind then
          redis.call(PUBLISH, channel_of(wake, behind), behind .. '?' .. string.format('%d', offer))
        end
        return offer, fence
      end
    end
  end
  return false, fence
end

-- The line of a Mutex's places (a sorted set, each place scored by when it
-- ends): the waiter whose place ends first, dropping places that have ended and
-- the place `except` (the caller's own, or nil), at most 16 per candidate. A key
-- of another type is an error, or, when `tolerant` (a multi-lock's release,
-- which must still release its other names), no line.
local function places_line(places, except, tolerant)
  local call = tolerant and redis.pcall or redis.call
  return {
    take = function()
      for _ = 1, 16 do
        local first = call('ZPOPMIN', places)
        if type(first) ~= 'table' or #first == 0 then
          return nil
        end
        if tonumber(first[2]) > server_ms() and first[1] ~= except then
          return first[1]
        end
      end
    end,
    peek = function()
      local firsts = call('ZRANGE', places, 0, 2, 'WITHSCORES')
      if type(firsts) ~= 'table' then
        return nil
      end
      for i = 1, #firsts, 2 do
        if tonumber(firsts[i + 1]) > server_ms() and firsts[i] ~= except then
          return firsts[i]
        end
      end
    end,
    skip_unheard = true,
  }
end
