-- Unfinished runs of jobs. KEYS: the jobs' `live` sets; ARGV[2 + i]: the base of KEYS[i].
-- Returns {now, {{slot, st, att, own, exp} ...} per key}.
local now = now_ms()
local out = {now}
for i, key in ipairs(KEYS) do
  want(key, 'zset')
  local base = ARGV[2 + i]
  local list = {}
  for _, s in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    local rk = base .. 'run:' .. s
    want(rk, 'hash')
    local r = redis.call('HMGET', rk, 'st', 'att', 'own', 'exp')
    if r[1] == 'running' then list[#list + 1] = {s, r[1], r[2], r[3], r[4]} end
  end
  out[i + 1] = list
end
return out
