-- Takes permits of a semaphore as one grant, if enough are free.
-- KEYS[1] semaphore hash, KEYS[2] fence key
-- ARGV[1] grant field (owner token .. permit count), ARGV[2] permits asked,
-- ARGV[3] lease ms, ARGV[4] fence memory ms (beyond the lease),
-- ARGV[5] the total to store when the hash has none, ARGV[6] holder label ('' for
-- none), stored as field 'l:' .. ARGV[1] while the grant lives
-- Returns {1, fence} when granted; {0, ms} when too few permits are free, ms
-- until the first grant held ends; an error reply 'FENCELOCK_TOTAL <total>' when
-- more permits are asked than the total, which waiting would never change.
-- Expired grants are deleted first, by the server's clock.
local now = server_ms()
local asked = tonumber(ARGV[2])
local lease = tonumber(ARGV[3])
local memory = lease + tonumber(ARGV[4])
local total = tonumber(redis.call('HGET', KEYS[1], 'permits'))
if not total then
  total = tonumber(ARGV[5])
  redis.call('HSET', KEYS[1], 'permits', ARGV[5])
end
stretch(KEYS[1], memory)
local function grant()
  -- A retry keeps an expiry that an extension already moved further.
  lengthen(KEYS[1], ARGV[1], now + lease)
  if ARGV[6] ~= '' then
    redis.call('HSET', KEYS[1], 'l:' .. ARGV[1], ARGV[6])
  end
end
local expiry = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if expiry and expiry > now then
  -- A retry of a grant whose reply was lost: the grant stands, with a fresh
  -- lease (never a shorter one) and a fresh fence, above every fence granted
  -- so far.
  grant()
  -- Only the number: next_fence also returns its text, which would be a third value.
  local fence = next_fence(KEYS[2], memory)
  return {1, fence}
end
if asked > total then
  return redis.error_reply('FENCELOCK_TOTAL ' .. total)
end
local used, soonest = held_permits(KEYS[1], now, true)
if used + asked > total then
  return {0, soonest or -1}
end
local fence = next_fence(KEYS[2], memory)
grant()
return {1, fence}
