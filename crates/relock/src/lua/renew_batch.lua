-- Renews many leases in one call.
-- KEYS[i] lock key; ARGV[2i-1] owner token, ARGV[2i] lease ms
-- Returns one entry per key: 1 renewed, 0 no longer held by that owner.
-- A key that changed type answers 0 through pcall instead of failing the
-- whole batch, so one bad key cannot cost every other lease its renewal.
local renewed = {}
for i, key in ipairs(KEYS) do
  local held = redis.pcall('GET', key)
  local token = ARGV[2 * i - 1]
  if type(held) == 'string' and string.sub(held, 1, #token) == token then
    redis.call('PEXPIRE', key, ARGV[2 * i])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
