-- An operator's release of a fair mutex, whoever holds it (core/force.lua):
-- the head of the line is woken as by a release. The line stays: it is waiters.
-- KEYS[1] lock key, KEYS[2] line, KEYS[3] places; ARGV[1] wake channel,
-- ARGV[2] fence memory ms
local value, pttl = take_value(KEYS[1], tonumber(ARGV[2]))
local queued = 0
if value and absent_or(KEYS[2], 'zset') and absent_or(KEYS[3], 'zset') then
  -- Waiters that stopped trying are dropped first, so that the wake-up reaches
  -- a live one.
  local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
  for _, waiter in ipairs(gone) do
    redis.call('ZREM', KEYS[2], waiter)
    redis.call('ZREM', KEYS[3], waiter)
  end
  queued = redis.call('ZCARD', KEYS[3])
  local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if first then
    redis.call(PUBLISH, channel_of(ARGV[1], first), first)
  end
end
return {now, value, pttl, {}, queued}
