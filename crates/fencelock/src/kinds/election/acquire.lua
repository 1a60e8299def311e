-- Makes the caller the leader of an election if nobody leads, and announces
-- the new leader to the election's observers.
-- KEYS[1] leader key, KEYS[2] fence key
-- ARGV[1] owner token (ends with ':'), ARGV[2] lease ms, ARGV[3] fence memory
-- ms (beyond the lease), ARGV[4] the value the leader publishes, ARGV[5] the
-- channel observers listen on
-- Returns {1, fence} when granted, {0, pttl} when another candidate leads.
-- The stored value is token .. fence .. ':' .. since .. ':' .. value, where
-- since is the server's clock in ms when this leadership began.
local token = ARGV[1]
local held = redis.call('GET', KEYS[1])
if held then
  if string.sub(held, 1, #token) == token then
    -- A retry of a grant whose reply was lost: answer it again.
    if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
    end
    return {1, tonumber(string.match(held, '^[^:]*:(%d+)'))}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
local fence, text = next_fence(KEYS[2], tonumber(ARGV[2]) + tonumber(ARGV[3]))
local t = redis.call('TIME')
local since = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('SET', KEYS[1], token .. text .. ':' .. since .. ':' .. ARGV[4], 'PX', ARGV[2])
redis.call(PUBLISH, ARGV[5], '*')
return {1, fence}
