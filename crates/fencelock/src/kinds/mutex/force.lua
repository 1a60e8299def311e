-- An operator's release of a mutex, whoever holds it (core/force.lua): the
-- lock then goes to the waiter whose place ends first and whose client still
-- listens, as a release hands it on; with none, one waiter of each listening
-- process is woken.
-- KEYS[1] lock key, KEYS[2] places; ARGV[1] wake channel, ARGV[2] fence memory
-- ms
local value, pttl = take_value(KEYS[1], tonumber(ARGV[2]))
if value then
  local handed = hand_over(KEYS[1], fence_text(value), ARGV[1], function()
    for _ = 1, 16 do
      local first = redis.call('ZPOPMIN', KEYS[2])
      if #first == 0 then
        return nil
      end
      if tonumber(first[2]) > now then
        return first[1]
      end
    end
  end)
  if not handed then
    redis.call(PUBLISH, ARGV[1], '')
  end
end
return {now, value, pttl, {}, 0}
