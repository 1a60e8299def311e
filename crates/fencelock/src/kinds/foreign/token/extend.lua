-- Makes a plain-token lock's expiry at least ARGV[2] ms from now if the
-- caller's token is its value; never shortens it, unless ARGV[3] is 'exactly'
-- (a grant being given up, whose guard claims nothing afterwards).
-- KEYS[1] the key; ARGV[1] owner token, ARGV[2] lease ms, ARGV[3] 'exactly'
-- (optional)
-- Returns 1 extended, 0 nothing held, -1 another owner holds it.
local value = redis.call('GET', KEYS[1])
if not value then
  return 0
end
if value ~= ARGV[1] then
  return -1
end
if ARGV[3] == 'exactly' or redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
