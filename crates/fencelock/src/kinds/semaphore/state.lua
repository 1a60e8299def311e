-- Reads a semaphore's total and the permits held, changing nothing.
-- KEYS[1] semaphore hash
-- Returns {total, held}: total -1 when none is stored.
local now = server_ms()
local used = held_permits(KEYS[1], now, false)
return {tonumber(redis.call('HGET', KEYS[1], 'permits')) or -1, used}
