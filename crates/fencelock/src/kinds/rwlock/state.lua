-- Shared by the RwLock scripts: prepended to each at build time.
--
-- A read-write lock is one hash, so every script sees all of it in one slot:
--   r<token><owner>  a read hold; its value is the hold's expiry, server ms
--   w<token><owner>  a write hold, likewise (all of one owner at a time)
--   q<token><owner>  a writer waiting with preference, likewise
--   fence-r          the fence shared by the read holds held now
--   fence-w          the fence shared by the write holds held now
-- A token ends at its only ':' (its client's tag, '.', 22 random characters),
-- an owner is '<client id>:<holder id>'.
-- Each hold expires on its own; expired holds and markers are deleted by
-- the next acquire or release, judged by the server's clock. The key's own
-- expiry only covers the longest of them, so that an idle lock leaves
-- nothing behind.

local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The live holds and markers, by kind ('r', 'w', 'q'), each an array of
-- {field, owner, expiry}; deletes the expired ones and counts them in
-- state.expired[kind].
local function load(key, now)
  local state = {
    r = {}, w = {}, q = {},
    expired = {r = 0, w = 0, q = 0},
    fences = {},
  }
  local flat = redis.call('HGETALL', key)
  for i = 1, #flat, 2 do
    local field, value = flat[i], flat[i + 1]
    local kind, _, owner = string.match(field, '^([rwq])([^:]*:)(.*)$')
    if kind then
      local expiry = tonumber(value) or 0
      if expiry <= now then
        redis.call('HDEL', key, field)
        state.expired[kind] = state.expired[kind] + 1
      else
        table.insert(state[kind], {field = field, owner = owner, expiry = expiry})
      end
    elseif field == 'fence-r' then
      state.fences.r = value
    elseif field == 'fence-w' then
      state.fences.w = value
    end
  end
  return state
end

-- Forgets the entry `field` of `kind` in a loaded state.
local function forget(state, kind, field)
  for i, entry in ipairs(state[kind]) do
    if entry.field == field then
      table.remove(state[kind], i)
      return
    end
  end
end

-- Drops the fence of a kind no longer held (a new hold of it takes a new
-- fence), and the key when nothing is left.
local function tidy(key, state)
  for _, kind in ipairs({'r', 'w'}) do
    if #state[kind] == 0 and state.fences[kind] then
      redis.call('HDEL', key, 'fence-' .. kind)
      state.fences[kind] = nil
    end
  end
  if #state.r + #state.w + #state.q == 0 then
    redis.call('DEL', key)
  end
end

-- How many entries of `kind` belong to `owner`, how many to others, and the
-- latest expiry among the others'.
local function tally(state, kind, owner)
  local mine, others, latest = 0, 0, 0
  for _, entry in ipairs(state[kind]) do
    if entry.owner == owner then
      mine = mine + 1
    else
      others = others + 1
      if entry.expiry > latest then
        latest = entry.expiry
      end
    end
  end
  return mine, others, latest
end
