-- Unfinished runs of jobs. KEYS: the jobs' `live` sets (the Rust side sends at most 512 per call);
-- ARGV[2 + i]: the base of KEYS[i].
-- Returns {now, {{slot, st, att, own, exp} ...} per key}.
local now = now_ms()
local out = {now}
for i, key in ipairs(KEYS) do
  local base = ARGV[2 + i]
  local list = {}
  for _, s in ipairs(on(key, 'zset', 'ZRANGE', key, 0, -1)) do
    local rk = base .. 'run:' .. s
    local r = on(rk, 'hash', 'HMGET', rk, 'st', 'att', 'own', 'exp')
    if r[1] == 'running' then list[#list + 1] = {s, r[1], r[2], r[3], r[4]} end
  end
  out[i + 1] = list
end
return out
