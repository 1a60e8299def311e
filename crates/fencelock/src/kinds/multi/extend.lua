-- Makes every name of a multi-lock last at least ARGV[2] ms from now, if the
-- caller still holds them all; otherwise changes nothing. It never shortens a
-- name's lease (see value/extend.lua).
-- KEYS[1..n] the names' lock keys; ARGV[1] owner token, ARGV[2] lease ms,
-- ARGV[3] 'exactly' (optional): see value/extend.lua
-- Returns 1 extended, 0 the caller holds none of them, -1 only some.
local token = ARGV[1]
local ours = 0
for _, key in ipairs(KEYS) do
  local held = redis.pcall('GET', key)
  if type(held) == 'string' and string.sub(held, 1, #token) == token then
    ours = ours + 1
  end
end
if ours < #KEYS then
  return ours == 0 and 0 or -1
end
local lease = tonumber(ARGV[2])
for _, key in ipairs(KEYS) do
  if ARGV[3] == 'exactly' or redis.call('PTTL', key) < lease then
    redis.call('PEXPIRE', key, lease)
  end
end
return 1
