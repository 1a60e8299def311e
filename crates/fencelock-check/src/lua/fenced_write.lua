-- Writes ARGV[2] to the protected counter on behalf of the holder of fence ARGV[1].
-- KEYS[1]: the counter; KEYS[2]: the highest fence the resource has seen.
-- Refused (0) when a higher fence was seen since; stored (1) otherwise.
local fence = tonumber(ARGV[1])
local highest = tonumber(redis.call('GET', KEYS[2]) or '0')
if fence < highest then
  return 0
end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
return 1
