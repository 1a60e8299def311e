-- An operator's release of a fair mutex, whoever holds it (core/force.lua,
-- value/take.lua): the lock is then offered to the first in line whose place
-- has not ended, as a release hands it on.
-- KEYS[1] lock key, KEYS[2] line, KEYS[3] places; ARGV[1] wake channel,
-- ARGV[2] fence memory ms, ARGV[3] the handoff window ms
local value, pttl = take_value(KEYS[1], tonumber(ARGV[2]))
local queued = 0
if value and absent_or(KEYS[2], 'zset') and absent_or(KEYS[3], 'zset') then
  -- Waiters that stopped trying are dropped first.
  local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
  for _, waiter in ipairs(gone) do
    redis.call('ZREM', KEYS[2], waiter)
    redis.call('ZREM', KEYS[3], waiter)
  end
  queued = redis.call('ZCARD', KEYS[3])
  hand_over(KEYS[1], fence_text(value), ARGV[1], fair_line(KEYS[2], KEYS[3], nil),
    tonumber(ARGV[3]))
end
return {now, value, pttl, {}, queued}
