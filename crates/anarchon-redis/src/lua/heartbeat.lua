-- Batched heartbeat. KEYS: run hashes (any jobs on one node; one hash slot in a cluster).
-- ARGV: 3 lease_ms, then per key: attempt, owner.
-- Returns {expires or 0 (lost) ...}, or {-2} when the command deadline passed.
local now = now_ms()
if expired(now) then return {-2} end
local exp = now + tonumber(ARGV[3])
-- Read every run first, so a key of the wrong type stops the batch before any write.
local rs = {}
for i, key in ipairs(KEYS) do rs[i] = on(key, 'hash', 'HMGET', key, 'st', 'att', 'own') end
local out = {}
for i, key in ipairs(KEYS) do
  local r = rs[i]
  if r[1] == 'running' and r[2] == ARGV[2 + 2 * i] and r[3] ~= '' and r[3] == ARGV[3 + 2 * i] then
    redis.call('HSET', key, 'exp', exp)
    out[i] = exp
  else
    out[i] = 0
  end
end
return out
