-- Raises a lock name's remembered fence to at least ARGV[1]. A RedLock grant's fence is the
-- highest one its majority of masters issued; remembering it on a majority means every later
-- majority meets a master that issues a higher one.
-- KEYS[1] fence key; ARGV[1] fence, ARGV[2] memory ms. Returns 1.
local last = tonumber(redis.call('GET', KEYS[1]))
if not last or last < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 1
