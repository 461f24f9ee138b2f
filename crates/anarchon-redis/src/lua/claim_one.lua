-- Lease claim. KEYS[1]: the run hash. ARGV: 1 the job's key base, 2 deadline, 3.. the
-- claim's arguments (see claim.lua).
return claim_run(KEYS[1], 2, now_ms())
