-- Takes a mutex if it is free.
-- KEYS[1] lock key, KEYS[2] fence key
-- ARGV[1] owner token (ends with ':'), ARGV[2] lease ms,
-- ARGV[3] fence memory ms (beyond the lease), ARGV[4] holder label ('' for none)
-- Returns {1, fence} when granted, {0, pttl} when held by another owner.
-- The stored value is token .. fence [.. ':' .. label].
local held = redis.call('GET', KEYS[1])
if held then
  if string.sub(held, 1, #ARGV[1]) == ARGV[1] then
    -- A retry of a grant whose reply was lost: answer it again, so retries
    -- after connection errors are idempotent.
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(string.match(held, '^[^:]*:(%d+)'))}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
local fence, text = next_fence(KEYS[2], tonumber(ARGV[2]) + tonumber(ARGV[3]))
local value = ARGV[1] .. text
if ARGV[4] ~= '' then
  value = value .. ':' .. ARGV[4]
end
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
return {1, fence}
