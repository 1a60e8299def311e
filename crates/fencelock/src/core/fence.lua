-- Shared by every script that grants a lock: prepended to it at build time.
--
-- fence_after(last) returns the next fencing token after `last` (nil when none
-- is remembered), as a number and as its decimal string; next_fence(fence_key,
-- memory_ms) does so for the last token kept in a fence key, and keeps the new
-- one there. The base is the server's clock
-- in microseconds, so tokens keep rising after the fence key expired, and after
-- a restart without persistence, as long as that clock does not step back. The
-- stored last token breaks ties within one microsecond and covers backward
-- steps shorter than the key's lifetime. Microseconds since 1970 stay below
-- 2^53, so Lua's doubles hold them exactly.
-- server_time() is the server's clock as TIME gives it, read once per script
-- (Valkey stops it while a script runs anyway): a release that checks its
-- waiters' places and grants a fence asks for it once.
local server_time_read
local function server_time()
  server_time_read = server_time_read or redis.call('TIME')
  return server_time_read
end

local function fence_after(last)
  local now = server_time()
  local fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
  if last and last >= fence then
    fence = last + 1
  end
  return fence, string.format('%.0f', fence)
end

local function next_fence(fence_key, memory_ms)
  local fence, text = fence_after(tonumber(redis.call('GET', fence_key)))
  redis.call('SET', fence_key, text, 'PX', memory_ms)
  return fence, text
end
