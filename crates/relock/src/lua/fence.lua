-- Shared by every script that grants a lock: prepended to it at build time.
--
-- next_fence(fence_key, memory_ms) returns the next fencing token of a lock
-- name, as a number and as its decimal string. The base is the server's clock
-- in microseconds, so tokens keep rising after the fence key expired, and after
-- a restart without persistence, as long as that clock does not step back. The
-- stored last token breaks ties within one microsecond and covers backward
-- steps shorter than the key's lifetime. Microseconds since 1970 stay below
-- 2^53, so Lua's doubles hold them exactly.
local function next_fence(fence_key, memory_ms)
  local now = redis.call('TIME')
  local fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local last = tonumber(redis.call('GET', fence_key))
  if last and last >= fence then
    fence = last + 1
  end
  local text = string.format('%.0f', fence)
  redis.call('SET', fence_key, text, 'PX', memory_ms)
  return fence, text
end
