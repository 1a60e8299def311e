-- Takes a read or a write hold of a read-write lock.
-- KEYS[1] lock hash, KEYS[2] fence key
-- ARGV[1] 'r' or 'w', ARGV[2] hold token (ends with ':'), ARGV[3] owner,
-- ARGV[4] lease ms, ARGV[5] fence memory ms (beyond the lease),
-- ARGV[6] marker ms: a refused writer leaves a marker that long (0: none)
-- Returns {1, fence} when granted; {0, pttl} when refused, pttl the time
-- until the holds (and markers) in the way expire unless renewed; the error
-- FENCELOCK_DEADLOCK when an owner holding only read holds asks to write.
-- Read holds: refused while another owner holds a write hold, and while
-- another owner's writer waits with preference, unless the asking owner
-- already holds something (refusing it could deadlock it against that
-- writer). Write holds: refused while another owner holds anything.
local key, mode, token, owner = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local lease, marker_ms = tonumber(ARGV[4]), tonumber(ARGV[6])
local hold, marker = mode .. token .. owner, 'q' .. token .. owner
local now = server_ms()
local state = load(key, now)
tidy(key, state)

local function grant(fence)
  if not fence then
    local _, text = next_fence(KEYS[2], lease + tonumber(ARGV[5]))
    fence = text
    redis.call('HSET', key, 'fence-' .. mode, fence)
  end
  -- A retry keeps an expiry that an extension already moved further.
  lengthen(key, hold, now + lease)
  redis.call('HDEL', key, marker)
  stretch(key, lease)
  return {1, tonumber(fence)}
end

local function refuse(latest)
  if mode == 'w' and marker_ms > 0 then
    redis.call('HSET', key, marker, now + marker_ms)
    stretch(key, marker_ms)
  end
  return {0, latest - now}
end

-- A hold already there is a retry whose reply was lost: the same grant.
if redis.call('HEXISTS', key, hold) == 1 then
  return grant(state.fences[mode])
end

local mine_r, others_r, latest_r = tally(state, 'r', owner)
local mine_w, others_w, latest_w = tally(state, 'w', owner)
if mode == 'r' then
  if others_w > 0 then
    return refuse(latest_w)
  end
  if mine_r + mine_w == 0 then
    local _, waiting, latest_q = tally(state, 'q', owner)
    if waiting > 0 then
      return refuse(latest_q)
    end
  end
  return grant(state.fences.r)
end
if mine_r > 0 and mine_w == 0 then
  return redis.error_reply('FENCELOCK_DEADLOCK an owner holding read holds asked to write')
end
if others_r + others_w > 0 then
  return refuse(math.max(latest_r, latest_w))
end
return grant(state.fences.w)
