-- Owner's finish. KEYS[1]: the run hash. ARGV: 1 the job's key base, 2 deadline, 3.. the
-- result's arguments (see finish.lua).
return finish_run(KEYS[1], 2, now_ms())
