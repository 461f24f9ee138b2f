-- Reads runs. KEYS: run hashes (the Rust side sends at most 512 per call).
-- Returns {now, {st, att, own, exp} or 0 ...}.
local now = now_ms()
local out = {now}
for i, key in ipairs(KEYS) do
  local r = on(key, 'hash', 'HMGET', key, 'st', 'att', 'own', 'exp')
  if r[1] then out[i + 1] = r else out[i + 1] = 0 end
end
return out
