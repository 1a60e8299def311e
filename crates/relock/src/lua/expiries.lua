-- Shared by the scripts of the locks whose key holds several holders, each
-- with its own expiry (read-write lock, semaphore): prepended to them at build
-- time. Expiries only ever move later here, so that no holder's guard counts on
-- more time than Redis keeps (see mutex_extend.lua).

-- Makes the key live at least `ms` more; never shortens it: other holders may
-- have longer leases.
local function stretch(key, ms)
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
