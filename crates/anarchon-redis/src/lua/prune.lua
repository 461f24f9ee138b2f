-- Retention: keep the newest `size` runs of the job (a manual run counts as a run of its
-- own) and drop history rows that finished before now - ttl. Running lease runs are never
-- pruned. Only keys named by anarchon's own indexes are deleted.
local function run_of(id) return string.match(id, '^([^|]*)') end
local function live_run(m)
  if string.sub(m, 1, 2) ~= 'l:' then return false end
  return redis.call('ZSCORE', k('live'), string.sub(m, 3)) ~= false
end
-- Drops a whole run: its rows, its row set, its run hash and its index entries.
local function drop_run(m)
  local rr = k('rr:' .. m)
  local ids = {}
  if kind(rr) == 'set' then ids = redis.call('SMEMBERS', rr) end
  local dels = {rr}
  for i, id in ipairs(ids) do dels[#dels + 1] = k('row:' .. id) end
  if string.sub(m, 1, 2) == 'l:' then dels[#dels + 1] = k('run:' .. string.sub(m, 3)) end
  redis.call('DEL', unpack(dels))
  if #ids > 0 then
    redis.call('ZREM', k('hist'), unpack(ids))
    redis.call('ZREM', k('fin'), unpack(ids))
  end
  redis.call('ZREM', k('runs'), m)
end
local function prune(size, ttl, now)
  if size < 1 then size = 1 end
  for _, m in ipairs(redis.call('ZRANGE', k('runs'), 0, -(size + 1))) do
    if not live_run(m) then drop_run(m) end
  end
  if ttl > 0 then
    local emptied = {}
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', k('fin'), '-inf', '(' .. (now - ttl))) do
      local m = run_of(id)
      if not live_run(m) then
        redis.call('DEL', k('row:' .. id))
        redis.call('ZREM', k('hist'), id)
        redis.call('ZREM', k('fin'), id)
        if kind(k('rr:' .. m)) == 'set' then redis.call('SREM', k('rr:' .. m), id) end
        emptied[m] = true
      end
    end
    for m, _ in pairs(emptied) do
      if kind(k('rr:' .. m)) == 'none' then drop_run(m) end
    end
  end
end
