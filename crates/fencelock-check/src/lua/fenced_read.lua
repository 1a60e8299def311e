-- Reads the protected counter on behalf of the holder of fence ARGV[1].
-- KEYS[1]: the counter; KEYS[2]: the highest fence the resource has seen.
-- A fence lower than one already seen is refused ({0, 0}); otherwise it becomes the highest
-- seen, so that an older holder's later write is refused: registering the fence on the read,
-- not only on the write, is what keeps a read-modify-write from losing an update.
local fence = tonumber(ARGV[1])
local highest = tonumber(redis.call('GET', KEYS[2]) or '0')
if fence < highest then
  return {0, 0}
end
redis.call('SET', KEYS[2], ARGV[1])
return {1, tonumber(redis.call('GET', KEYS[1]) or '0')}
