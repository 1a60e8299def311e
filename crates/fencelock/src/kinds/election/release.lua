-- Ends the caller's leadership if it still leads: wakes one waiting candidate
-- in each process and every observer.
-- KEYS[1] leader key; ARGV[1] owner token, ARGV[2] the candidates' wake
-- channel, ARGV[3] the observers' channel
-- Returns 1 released, 0 nobody leads, -1 another candidate leads.
local held = redis.call('GET', KEYS[1])
if not held then
  return 0
end
if string.sub(held, 1, #ARGV[1]) ~= ARGV[1] then
  return -1
end
redis.call('DEL', KEYS[1])
redis.call(PUBLISH, ARGV[2], '')
redis.call(PUBLISH, ARGV[3], '*')
return 1
