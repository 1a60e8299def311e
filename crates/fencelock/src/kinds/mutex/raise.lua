-- Raises the fence a master keeps for a grant of several masters (RedLock): the
-- grant's fence is the highest any master of its majority issued, and
-- remembering it in the held value of a majority means every later majority
-- meets a master whose next fence is higher (after a release the value keeps
-- it, as `~fence`). Only the holder's own value is raised.
-- KEYS[1] lock key; ARGV[1] owner token, ARGV[2] fence
-- Returns 1 when the value held by the token carries at least the fence, else 0.
-- Value forms: value.lua.
local value = redis.call('GET', KEYS[1])
if not value or is_released(value) or string.sub(value, 1, #ARGV[1]) ~= ARGV[1] then
  return 0
end
local fence = ARGV[2]
if tonumber(fence_text(value)) < tonumber(fence) then
  local rest = string.sub(value, #ARGV[1] + #fence_text(value) + 1)
  redis.call('SET', KEYS[1], ARGV[1] .. fence .. rest, 'KEEPTTL')
end
return 1
