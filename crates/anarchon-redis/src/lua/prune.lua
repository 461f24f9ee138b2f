-- Retention: keep the newest `size` runs of the job (a manual run counts as a run of its
-- own; `size` 0 = TTL only) and drop history rows that finished before now - ttl (`ttl`
-- 0 = none). Running lease runs are never pruned. Only keys named by anarchon's own
-- indexes are deleted.
local function prune(size, ttl, now)
  local function live_run(m)
    if string.sub(m, 1, 2) ~= 'l:' then return false end
    return redis.call('ZSCORE', k('live'), string.sub(m, 3)) ~= false
  end
  -- Drops a whole run: its rows, its run hash or row set, and its index entries.
  local function drop_run(m)
    local ids, dels = {}, {}
    if string.sub(m, 1, 2) == 'l:' then
      local rk = k('run:' .. string.sub(m, 3))
      local att = tonumber(redis.call('HGET', rk, 'att')) or 0
      for n = 1, att do ids[n] = m .. '|' .. n end
      dels[1] = rk
    else
      local rr = k('rr:' .. m)
      if redis.call('TYPE', rr)['ok'] == 'set' then ids = redis.call('SMEMBERS', rr) end
      dels[1] = rr
      for i, id in ipairs(ids) do dels[i + 1] = k('row:' .. id) end
    end
    redis.call('DEL', unpack(dels))
    if #ids > 0 then
      redis.call('ZREM', k('hist'), unpack(ids))
      redis.call('ZREM', k('fin'), unpack(ids))
    end
    redis.call('ZREM', k('runs'), m)
  end
  -- Removes `ids` from the zset `ix`: by rank when they are exactly its oldest entries (the
  -- usual case: what goes is the oldest), which in the compact encoding costs what is
  -- removed; else by member (each a scan of the zset).
  local function drop_oldest(ix, ids)
    local key = k(ix)
    local tail = redis.call('ZRANGE', key, -#ids, -1)
    local set = {}
    for _, id in ipairs(ids) do set[id] = true end
    local same = #tail == #ids
    if same then
      for _, id in ipairs(tail) do
        if not set[id] then same = false; break end
      end
    end
    if same then
      redis.call('ZREMRANGEBYRANK', key, -#ids, -1)
    else
      redis.call('ZREM', key, unpack(ids))
    end
  end
  if size > 0 then
    local old = redis.call('ZRANGE', k('runs'), size, -1)
    -- Lease runs that are not running, all of them the oldest: drop them together, their
    -- index entries by rank; anything else (a live or manual run among them) one by one.
    local plain = #old > 0
    if plain then
      -- `live` holds the job's unfinished runs (a few): one read instead of one per run.
      local live = {}
      for _, s in ipairs(redis.call('ZRANGE', k('live'), 0, -1)) do live['l:' .. s] = true end
      for _, m in ipairs(old) do
        if string.sub(m, 1, 2) ~= 'l:' or live[m] then plain = false; break end
      end
    end
    if plain then
      local ids, dels = {}, {}
      for i, m in ipairs(old) do
        local rk = k('run:' .. string.sub(m, 3))
        dels[i] = rk
        local att = tonumber(redis.call('HGET', rk, 'att')) or 0
        for n = 1, att do ids[#ids + 1] = m .. '|' .. n end
      end
      redis.call('DEL', unpack(dels))
      if #ids > 0 then
        drop_oldest('hist', ids)
        drop_oldest('fin', ids)
      end
      redis.call('ZREMRANGEBYRANK', k('runs'), size, -1)
    else
      for _, m in ipairs(old) do
        if not live_run(m) then drop_run(m) end
      end
    end
  end
  if ttl <= 0 then return end
  local done = {}
  local cut = '(' .. string.format('%d', ttl - now)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', k('fin'), cut, '+inf')) do
    local m, rest = string.match(id, '^([^|]*)|(.*)$')
    if m and not done[m] and not live_run(m) then
      if string.sub(m, 1, 2) == 'l:' then
        -- Attempts end in order, so once the last attempt expired every row of the run has.
        local rk = k('run:' .. string.sub(m, 3))
        local att = redis.call('HGET', rk, 'att')
        if not att or att == rest then
          drop_run(m)
          done[m] = true
        else
          redis.call('HDEL', rk, rest .. 'i', rest .. 'r', rest .. 's', rest .. 'f',
            rest .. 't', rest .. 'e', rest .. 'x')
          redis.call('ZREM', k('hist'), id)
          redis.call('ZREM', k('fin'), id)
        end
      else
        local rr = k('rr:' .. m)
        redis.call('DEL', k('row:' .. id))
        redis.call('ZREM', k('hist'), id)
        redis.call('ZREM', k('fin'), id)
        local t = redis.call('TYPE', rr)['ok']
        if t == 'set' then redis.call('SREM', rr, id) end
        if t == 'none' or (t == 'set' and redis.call('EXISTS', rr) == 0) then
          drop_run(m)
          done[m] = true
        end
      end
    end
  end
end
