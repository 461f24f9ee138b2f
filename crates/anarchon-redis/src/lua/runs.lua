-- Reads runs. KEYS: run hashes. Returns {now, {st, att, own, exp} or 0 ...}.
local now = now_ms()
local out = {now}
for i, key in ipairs(KEYS) do
  local r = on(key, 'hash', 'HMGET', key, 'st', 'att', 'own', 'exp')
  if r[1] then out[i + 1] = {r[1], r[2], r[3], r[4]} else out[i + 1] = 0 end
end
return out
