-- An operator's release of a mutex, whoever holds it (core/force.lua,
-- value/take.lua): the lock is then offered to the waiter whose place ends
-- first and whose client still listens, as a release hands it on; with none,
-- one waiter of each listening process is woken.
-- KEYS[1] lock key, KEYS[2] places; ARGV[1] wake channel, ARGV[2] fence memory
-- ms, ARGV[3] the handoff window ms
local memory = tonumber(ARGV[2])
local value, pttl = take_value(KEYS[1], memory)
if value then
  local fence = fence_text(value)
  local handed, last = hand_over(KEYS[1], fence, ARGV[1], places_line(KEYS[2], nil, false),
    tonumber(ARGV[3]))
  if not handed then
    if last ~= fence then
      leave_released(KEYS[1], last, memory)
    end
    redis.call(PUBLISH, ARGV[1], '')
  end
end
return {now, value, pttl, {}, 0}
