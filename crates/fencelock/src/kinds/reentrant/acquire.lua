-- Takes a reentrant mutex for an owner, or one more hold of it by that owner.
-- KEYS[1] lock hash, KEYS[2] fence key
-- ARGV[1] hold token (ends with ':'), ARGV[2] owner, ARGV[3] lease ms,
-- ARGV[4] fence memory ms (beyond the lease), ARGV[5] holder label ('' for none)
-- Returns {1, fence} when granted, {0, pttl} when another owner holds it.
-- The hash: 'owner', 'count' (holds), 'fence' (taken by the owner's first
-- hold, shared by the holds after it), 'label', and one field per hold token.
-- Tokens end with ':' and those names have none, so they never collide.
local lease = tonumber(ARGV[3])

-- Never shortens the key: the owner's other holds may have longer leases.
local function stretch()
  if redis.call('PTTL', KEYS[1]) < lease then
    redis.call('PEXPIRE', KEYS[1], lease)
  end
end

local owner = redis.call('HGET', KEYS[1], 'owner')
if owner then
  if owner ~= ARGV[2] then
    return {0, redis.call('PTTL', KEYS[1])}
  end
  -- A token already present is a retry whose reply was lost: the same hold,
  -- not one more.
  if redis.call('HSETNX', KEYS[1], ARGV[1], '1') == 1 then
    redis.call('HINCRBY', KEYS[1], 'count', 1)
  end
  stretch()
  return {1, tonumber(redis.call('HGET', KEYS[1], 'fence'))}
end
local fence, text = next_fence(KEYS[2], lease + tonumber(ARGV[4]))
-- A hash without an owner is none of ours: start clean rather than take its
-- fields for holds.
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'owner', ARGV[2], 'count', 1, 'fence', text, ARGV[1], '1')
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'label', ARGV[5])
end
redis.call('PEXPIRE', KEYS[1], lease)
return {1, fence}
