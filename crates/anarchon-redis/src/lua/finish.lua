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
  -- Nothing is written unless every key written below has its type (a key of another type
  -- stops the finish with it named). The run hash was read above. Pruning (one finish in
  -- `size / 8`, or a TTL) also writes `runs`, `hist` and `fin`: check them first. Otherwise
  -- the first write checks `live` itself, and `live` is restored if `fin` then fails: on
  -- most finishes 4 calls instead of 8 (four `TYPE` reads fewer).
  local size, ttl = tonumber(ARGV[a + 7]), tonumber(ARGV[a + 8])
  if size > 0 or ttl > 0 then
    want(k('runs'), 'zset'); want(k('hist'), 'zset'); want(k('fin'), 'zset')
  end
  local live = k('live')
  local was_live = on(live, 'zset', 'ZREM', live, slot)
  if r[4] == 'running' then
    local f = redis.pcall('ZADD', k('fin'), -now, 'l:' .. slot .. '|' .. att)
    if type(f) == 'table' and f.err then
      if was_live == 1 then redis.call('ZADD', live, slot, slot) end
      want(k('fin'), 'zset')
      error(f)
    end
    if ARGV[a + 6] == '1' then
      redis.call('HSET', rk, 'st', ARGV[a + 4], 'own', '', att .. 's', ARGV[a + 4],
        att .. 'e', now, att .. 'x', ARGV[a + 5])
    else
      redis.call('HSET', rk, 'st', ARGV[a + 4], 'own', '', att .. 's', ARGV[a + 4],
        att .. 'e', now)
    end
  else
    redis.call('HSET', rk, 'st', ARGV[a + 4], 'own', '')
  end
  prune(size, ttl, now)
  return {1, now}
end
