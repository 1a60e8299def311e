-- Releases a plain-token lock if the caller's token is its value, as each of
-- those libraries' own release does (GET, compare, DEL).
-- KEYS[1] the key; ARGV[1] owner token
-- Returns 1 released, 0 nothing held, -1 another owner holds it.
local value = redis.call('GET', KEYS[1])
if not value then
  return 0
end
if value ~= ARGV[1] then
  return -1
end
redis.call('DEL', KEYS[1])
return 1
