-- Changes the value the leader publishes, if the caller still leads; its
-- fence, since-when and lease stay as they are. Announces the change to the
-- election's observers.
-- KEYS[1] leader key; ARGV[1] owner token, ARGV[2] the new value,
-- ARGV[3] the observers' channel
-- Returns 1 changed, 0 nobody leads, -1 another candidate leads.
local held = redis.call('GET', KEYS[1])
if not held then
  return 0
end
if string.sub(held, 1, #ARGV[1]) ~= ARGV[1] then
  return -1
end
local head = string.match(held, '^[^:]*:%d+:%d+:')
if not head then
  return -1
end
redis.call('SET', KEYS[1], head .. ARGV[2], 'KEEPTTL')
redis.call(PUBLISH, ARGV[3], '*')
return 1
