-- Renews many leases of one length in one call, of any primitive.
-- KEYS[i] a key; ARGV[1] the lease ms of every one; ARGV[i + 1] the key's kind
-- (its first character) followed by its member
-- Kinds, by how a primitive stores its holders:
--   'v'  the key's string value starts with member (Mutex, FairMutex; their
--        tokens end with ':', so no token is the start of another), and is not
--        an offer to it that it has not claimed ('+?' after the fence:
--        kinds/value/value.lua)
--   'x'  the key's string value is member, exactly (another library's layout,
--        whose tokens carry no end mark)
--   'h'  the hash has field member (one owner per key)
--   'e'  the hash field member holds that holder's expiry in server ms
--        (several holders per key, each with its own lease)
--   'z'  the sorted set has member, scored by its expiry in server ms
-- For 'e' and 'z' a holder whose own expiry has passed is no longer held,
-- even if no acquire has purged it yet: renewing it would revive a lease
-- that already ended.
-- A renewal never shortens a lease: a key, or a holder's expiry, that an
-- extension moved further stays as it is. A key of several holders expires no
-- earlier than its longest lease.
-- Returns one character per key, in the order of KEYS: '1' renewed, '0' no
-- longer held by that member (one string: a reply of thousands of integers
-- costs the client more to read).
-- A key that changed type answers 0 through pcall instead of failing the
-- whole batch, so one bad key cannot cost every other lease its renewal.
local now
local function server_ms()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end

local function held(kind, key, member)
  if kind == 'v' then
    local value = redis.pcall('GET', key)
    return type(value) == 'string' and string.sub(value, 1, #member) == member
      and string.find(value, '^%d+%+%?', #member + 1) == nil
  elseif kind == 'x' then
    return redis.pcall('GET', key) == member
  elseif kind == 'h' then
    return redis.pcall('HEXISTS', key, member) == 1
  elseif kind == 'e' then
    local expiry = redis.pcall('HGET', key, member)
    return type(expiry) == 'string' and (tonumber(expiry) or 0) > server_ms()
  elseif kind == 'z' then
    local score = redis.pcall('ZSCORE', key, member)
    return type(score) == 'string' and (tonumber(score) or 0) > server_ms()
  end
  return false
end

local lease = tonumber(ARGV[1])
local renewed = {}
for i, key in ipairs(KEYS) do
  local kind, member = string.sub(ARGV[i + 1], 1, 1), string.sub(ARGV[i + 1], 2)
  if held(kind, key, member) then
    if kind == 'e' then
      lengthen(key, member, server_ms() + lease)
    elseif kind == 'z' then
      local expiry = server_ms() + lease
      if tonumber(redis.call('ZSCORE', key, member)) < expiry then
        redis.call('ZADD', key, 'XX', expiry, member)
      end
    end
    stretch(key, lease)
    renewed[i] = '1'
  else
    renewed[i] = '0'
  end
end
return table.concat(renewed)
