-- Shared by the scripts of the locks whose key holds several holders, each
-- with its own expiry (read-write lock, semaphore): prepended to them at build
-- time. Expiries only ever move later here, so that no holder's guard counts on
-- more time than Redis keeps (see kinds/value/extend.lua).

-- Makes the key live at least `ms` more; never shortens it: other holders may
-- have longer leases. Usually one command, where the server has PEXPIRE's GT
-- option (Redis 7, Valkey): the time to live is read only when GT changed
-- nothing (the key lives longer already, or has no expiry yet: GT leaves a
-- key without one as it is) or the server refuses the option (Redis 6.2).
local function stretch(key, ms)
  local stretched = redis.pcall('PEXPIRE', key, ms, 'GT')
  if stretched == 1 then
    return
  end
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

-- Moves a holder's expiry in the hash to `expiry`, unless it already ends later.
local function lengthen(key, field, expiry)
  local current = tonumber(redis.call('HGET', key, field))
  if not current or current < expiry then
    redis.call('HSET', key, field, expiry)
  end
end
