-- Releases a fair lock if the caller holds it, or gives up the caller's place
-- in line; then, if the lock is free and that changed who may take it, wakes
-- the first waiter alone (the payload is its token).
-- KEYS[1] lock key, KEYS[2] line, KEYS[3] places (see fair_acquire.lua)
-- ARGV[1] owner token, ARGV[2] wake channel
-- Returns 1 released, 0 not held (the lock is free or expired), -1 another
-- owner holds it.
local token = ARGV[1]
local was_first = redis.call('ZRANGE', KEYS[2], 0, 0)[1] == token
redis.call('ZREM', KEYS[2], token)
redis.call('ZREM', KEYS[3], token)

local held = redis.call('GET', KEYS[1])
local released = 0
if held then
  if string.sub(held, 1, #token) ~= token then
    return -1
  end
  redis.call('DEL', KEYS[1])
  released = 1
end
if released == 0 and not was_first then
  return 0
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, waiter in ipairs(gone) do
  redis.call('ZREM', KEYS[2], waiter)
  redis.call('ZREM', KEYS[3], waiter)
end
local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if first then
  redis.call(PUBLISH, ARGV[2], first)
end
return released
