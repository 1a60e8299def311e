-- Gives back one hold of a read-write lock, and the caller's place as a
-- waiting writer if it has one; wakes whoever may now get in.
-- KEYS[1] lock hash
-- ARGV[1] 'r' or 'w', ARGV[2] hold token, ARGV[3] owner,
-- ARGV[4] readers' wake channel, ARGV[5] writers' wake channel
-- Returns 1 released, 0 that hold is gone (expired, or released before).
-- Only the owner granted a hold knows its token, so a hold present is proof
-- of ownership; a hold absent changes nothing of anyone else's.
local key, mode, token, owner = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local hold, marker = mode .. token .. owner, 'q' .. token .. owner
local state = load(key, server_ms())
local before = {
  w = #state.w + state.expired.w,
  q = #state.q + state.expired.q,
  holds = #state.r + #state.w + state.expired.r + state.expired.w,
}
local released = redis.call('HDEL', key, hold) == 1
forget(state, mode, hold)
if redis.call('HDEL', key, marker) == 1 then
  forget(state, 'q', marker)
end
tidy(key, state)

-- Readers may enter once no write hold is left and no writer waits ahead of
-- them: every reader of every process retries.
local readers_blocked_before = before.w > 0 or before.q > 0
if readers_blocked_before and #state.w == 0 and #state.q == 0 then
  redis.call(PUBLISH, ARGV[4], '*')
end
-- A writer may enter once no hold at all is left: one writer per process
-- retries, as for a mutex.
if before.holds > 0 and #state.r + #state.w == 0 then
  redis.call(PUBLISH, ARGV[5], '')
end
if released then
  return 1
end
return 0
