-- Releases every name of a multi-lock still held by the caller, leaving each
-- name's last fence behind (mutex/value.lua), and wakes the waiters of each
-- released name that someone waited for.
-- KEYS[1..n] the names' lock keys; ARGV[1] owner token, ARGV[2] fence memory
-- ms, ARGV[3..n+2] the names' wake channels, in the order of KEYS
-- Returns 1 every name was held and is released, 0 none was held by the
-- caller any more, -1 only some were (those are released; the others had
-- expired, been deleted or been taken).
-- A key of another type is not the caller's: reading it through pcall lets
-- the other names still be released.
local token = ARGV[1]
local released = 0
for i, key in ipairs(KEYS) do
  local held = redis.pcall('GET', key)
  if type(held) == 'string' and string.sub(held, 1, #token) == token then
    leave_released(key, fence_text(held), tonumber(ARGV[2]))
    if is_marked(held) then
      redis.call(PUBLISH, ARGV[i + 2], '')
    end
    released = released + 1
  end
end
if released == #KEYS then
  return 1
elseif released == 0 then
  return 0
end
return -1
