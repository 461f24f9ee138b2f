-- Owner's finish of one run, as a function: `finish_one.lua` calls it once, `finish_many.lua`
-- once per result of a batch. rk: the run hash; the result's arguments are ARGV[a + 1 ..]:
-- 1 slot, 2 attempt, 3 owner, 4 status, 5 error, 6 has error (1/0), 7 history size (0 on
-- the finishes that prune by age only: see `finish_prune_period` in lease.rs), 8 history
-- ttl ms; `B` (the prelude's key base) is the job's; now: the server clock, read
-- once per script call.
-- Returns {1, now} done, {0} lost, {-2} deadline passed.
local function finish_run(rk, a, now)
  local slot, att = ARGV[a + 1], ARGV[a + 2]
  if expired(now) then return {-2} end
  local r = on(rk, 'hash', 'HMGET', rk, 'st', 'att', 'own', att .. 's')
  if r[1] ~= 'running' or r[2] ~= att or r[3] == '' or r[3] ~= ARGV[a + 3] then return {0} end
  want(k('live'), 'zset'); want(k('fin'), 'zset'); want(k('runs'), 'zset')
  want(k('hist'), 'zset')
  if r[4] == 'running' then
    if ARGV[a + 6] == '1' then
      redis.call('HSET', rk, 'st', ARGV[a + 4], 'own', '', att .. 's', ARGV[a + 4],
        att .. 'e', now, att .. 'x', ARGV[a + 5])
    else
      redis.call('HSET', rk, 'st', ARGV[a + 4], 'own', '', att .. 's', ARGV[a + 4],
        att .. 'e', now)
    end
    redis.call('ZADD', k('fin'), -now, 'l:' .. slot .. '|' .. att)
  else
    redis.call('HSET', rk, 'st', ARGV[a + 4], 'own', '')
  end
  redis.call('ZREM', k('live'), slot)
  prune(tonumber(ARGV[a + 7]), tonumber(ARGV[a + 8]), now)
  return {1, now}
end
