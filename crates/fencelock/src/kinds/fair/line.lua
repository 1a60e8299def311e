-- A FairMutex's line, as hand_over (value/value.lua) reads it: prepended to the
-- fair lock's scripts at build time. The line is two sorted sets, the line
-- itself (member -> arrival number) and the places (member -> when the place
-- ends, server ms); a member is in both or in neither.
--
-- fair_line(line_key, places_key, stop): take() gives the first in line whose
-- place has not ended, taken out of both sets; those whose place ended are
-- dropped on the way, at most 16 per call, after which `blocked` is true. It
-- stops at `stop` (the caller's own member, or nil), which stays in line while
-- its place lasts: a caller whose place ended (it stopped trying for longer
-- than a place lasts) has lost its turn, and is dropped like any other.
-- peek() gives the first left in line, if its place has not ended. The line
-- skips nobody for not listening: a waiter reconnecting its pub/sub connection
-- keeps its turn, and one that never claims its offer costs the window.
local function fair_line(line_key, places_key, stop)
  local line = {skip_unheard = false, blocked = false}
  function line.take()
    for _ = 1, 16 do
      local first
      if stop then
        first = redis.call('ZRANGE', line_key, 0, 0)[1]
        if not first then
          return nil
        end
      else
        first = redis.call('ZPOPMIN', line_key)[1]
        if not first then
          return nil
        end
      end
      local ends = tonumber(redis.call('ZSCORE', places_key, first))
      local live = ends and ends > server_ms()
      if first == stop and live then
        return nil
      end
      if stop then
        -- Read, not popped: out of the line now.
        redis.call('ZREM', line_key, first)
      end
      redis.call('ZREM', places_key, first)
      if live then
        return first
      end
    end
    line.blocked = true
  end
  function line.peek()
    local first = redis.call('ZRANGE', line_key, 0, 0)[1]
    if first and first ~= stop then
      local ends = tonumber(redis.call('ZSCORE', places_key, first))
      if ends and ends > server_ms() then
        return first
      end
    end
  end
  return line
end
