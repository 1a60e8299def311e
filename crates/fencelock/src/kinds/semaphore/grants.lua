-- Shared by the semaphore's scripts: prepended to them at build time.
--
-- A semaphore is one hash. Its field 'permits' holds the total; each grant is
-- the field '<owner token><permit count>' (the token ends with ':'), whose
-- value is that grant's expiry in the server's milliseconds. Grants expire one
-- by one, by that value: the hash itself lives at least as long as its longest
-- grant (every script and the batch renewal stretch it), and the total with it.

-- The server's clock in milliseconds: never the client's.
local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The permits held by grants whose lease has not ended at `now`, and the ms
-- until the first of those ends (nil when there is none). With `purge`, the
-- grants whose lease has ended are deleted on the way, with their holder labels
-- (`l:<grant field>`).
local function held_permits(key, now, purge)
  local fields = redis.call('HGETALL', key)
  local used, soonest = 0, nil
  for i = 1, #fields, 2 do
    local count = string.match(fields[i], '^[^:]+:(%d+)$')
    if count then
      local expiry = tonumber(fields[i + 1])
      if not expiry or expiry <= now then
        if purge then
          redis.call('HDEL', key, fields[i], 'l:' .. fields[i])
        end
      else
        used = used + tonumber(count)
        if not soonest or expiry - now < soonest then
          soonest = expiry - now
        end
      end
    end
  end
  return used, soonest
end

