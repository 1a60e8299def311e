-- An operator's release of an election's leadership, whoever leads
-- (core/force.lua): the leader's key is removed, and, as a resignation does,
-- one waiting candidate in each process is woken and every observer told. The
-- fence key stays, so fences keep rising.
-- KEYS[1] leader key; ARGV[1] the candidates' wake channel, ARGV[2] fence
-- memory ms (unused). The observers' channel is the leader key's name and
-- '-changes' (election.rs: LEADER_KEY, CHANGES), in the key's slot.
local found, pttl = false, -2
if of_type(KEYS[1], 'string') then
  found = redis.call('GET', KEYS[1])
  pttl = redis.call('PTTL', KEYS[1])
  redis.call('DEL', KEYS[1])
  redis.call(PUBLISH, ARGV[1], '')
  redis.call(PUBLISH, KEYS[1] .. '-changes', '*')
end
return {now, found, pttl, {}, 0}
