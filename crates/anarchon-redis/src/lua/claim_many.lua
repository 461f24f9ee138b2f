-- A batch of lease claims in one script call, each exactly as `claim_one.lua` would run it,
-- in the order given. KEYS: the run hashes (any jobs on one node; one hash slot in a
-- cluster). ARGV: 1 '', 2 deadline, then per claim 11 arguments: its job's key base and the
-- claim's 10 arguments (see claim.lua). Returns one reply of claim.lua per claim.
local now = now_ms()
local out = {}
for i, rk in ipairs(KEYS) do
  local a = 2 + (i - 1) * 11
  B = ARGV[a + 1]
  out[i] = claim_run(rk, a + 1, now)
end
return out
