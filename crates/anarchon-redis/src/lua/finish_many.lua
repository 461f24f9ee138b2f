-- A batch of owners' finishes in one script call, each exactly as `finish_one.lua` would run
-- it, in the order given. KEYS: the run hashes (any jobs on one node; one hash slot in a
-- cluster). ARGV: 1 '', 2 deadline, then per result 9 arguments: its job's key base and the
-- result's 8 arguments (see finish.lua). Returns one reply of finish.lua per result.
local now = now_ms()
local out = {}
for i, rk in ipairs(KEYS) do
  local a = 2 + (i - 1) * 9
  B = ARGV[a + 1]
  out[i] = finish_run(rk, a + 1, now)
end
return out
