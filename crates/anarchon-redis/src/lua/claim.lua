-- Lease claim of one run, as a function: `claim_one.lua` calls it once, `claim_many.lua` once
-- per claim of a batch. rk: the run hash; the claim's arguments are ARGV[a + 1 ..]: 1 slot,
-- 2 not_after, 3 lease_ms, 4 owner, 5 overlap skip (1/0), 6 reason, 7 scheduled_at,
-- 8 history size, 9 history ttl ms (0 = none), 10 the fence modulo 16 at which this job
-- prunes (its phase, `anarchon_core::history::pruning_fence_residue`); `B` (the prelude's
-- key base) is the job's;
-- now: the server clock (`TIME`, read once per script call: a batch runs atomically, so
-- every claim of it is judged at the moment the server ran the batch).
-- Returns {1, now, fence} won (the lease ends at now + lease_ms), {0, now} taken,
-- {-1, now} late, {2, running_slot} overlap, {-2, now} command deadline passed.
local function claim_run(rk, a, now)
  local slot = ARGV[a + 1]
  if expired(now) then return {-2, now} end
  if now > tonumber(ARGV[a + 2]) then return {-1, now} end
  -- Taken: the two instances that lose a slot stop here, at one read. The winner's claim
  -- already interrupted the earlier runs whose lease had ended by then (a lease that ends
  -- later is left to the backups' takeover or to the next slot's claim).
  if on(rk, 'hash', 'HLEN', rk) > 0 then return {0, now} end
  local live, runs, hist, fk = k('live'), k('runs'), k('hist'), k('fence')
  -- Read pass over the job's earlier unfinished runs (no write before every check passed).
  local earlier = on(live, 'zset', 'ZRANGEBYSCORE', live, '-inf', '(' .. slot)
  local holder = nil
  if #earlier > 0 then
    local ended = {}
    for _, s in ipairs(earlier) do
      local ek = k('run:' .. s)
      local r = on(ek, 'hash', 'HMGET', ek, 'st', 'att', 'own', 'exp')
      if r[1] == 'running' then
        if r[3] == '' or tonumber(r[4]) <= now then
          ended[#ended + 1] = {s, r[2]}
        elseif holder == nil then
          holder = s
        end
      end
    end
    if #ended > 0 then
      -- Rare: check every key written below before the first write.
      want(rk, 'hash'); want(runs, 'zset'); want(hist, 'zset'); want(k('fin'), 'zset')
      want(fk, 'string')
      -- [B-15] earlier runs whose lease ended unfinished are replaced by this slot.
      for _, e in ipairs(ended) do
        redis.call('HSET', k('run:' .. e[1]), 'st', 'interrupted', 'own', '')
        redis.call('ZREM', live, e[1])
        row_end(e[1], e[2], 'interrupted', now, 'replaced by the next slot')
      end
    end
  end
  if ARGV[a + 5] == '1' and holder ~= nil then return {2, tonumber(holder)} end
  -- The writes, ordered so that a key of the wrong type stops the claim with nothing written
  -- but a skipped fence number: `live` and the run hash were read above; the fence (INCR)
  -- and `runs` fail before anything else is written; `hist` is undone from `runs` if it fails.
  local fence = on(fk, 'string', 'INCR', fk)
  local id = 'l:' .. slot
  on(runs, 'zset', 'ZADD', runs, -tonumber(slot), id)
  local r = redis.pcall('ZADD', hist, -now, id .. '|1')
  if type(r) == 'table' and r.err then
    redis.call('ZREM', runs, id)
    want(hist, 'zset')
    error(r)
  end
  redis.call('HSET', rk, 'st', 'running', 'att', '1', 'starts', '1', 'own', ARGV[a + 4],
    'exp', now + tonumber(ARGV[a + 3]), 'sched', ARGV[a + 7], '1i', ARGV[a + 4],
    '1r', ARGV[a + 6], '1s', 'running', '1f', fence, '1t', now)
  redis.call('ZADD', live, slot, slot)
  -- Retention: a finish prunes (by count on one finish in `size / 8`, see `lease.rs`); a
  -- claim prunes on one fence in 16 of the job only, at the job's own phase (jobs whose
  -- fences go in step prune in different seconds), which bounds the runs that never finish
  -- (interrupted, exhausted) at no cost to the rest.
  if fence % 16 == tonumber(ARGV[a + 10]) then
    prune(tonumber(ARGV[a + 8]), tonumber(ARGV[a + 9]), now)
  end
  return {1, now, fence}
end
