-- Retention: keep the newest `size` runs of the job (a manual run counts as a run of its
-- own) and drop history rows that finished before now - ttl. Running lease runs are never
-- pruned. Keys of the wrong type are skipped, never deleted.
local function run_of(id) return string.match(id, '^([^|]*)') end
local function live_run(m)
  if string.sub(m, 1, 2) ~= 'l:' then return false end
  return redis.call('ZSCORE', k('live'), string.sub(m, 3)) ~= false
end
local function drop_row(id, m)
  local rk = k('row:' .. id)
  local t = kind(rk)
  if t ~= 'hash' and t ~= 'none' then return end
  redis.call('DEL', rk)
  redis.call('ZREM', k('hist'), id)
  redis.call('ZREM', k('fin'), id)
  if kind(k('rr:' .. m)) == 'set' then redis.call('SREM', k('rr:' .. m), id) end
end
local function drop_run_if_empty(m)
  if kind(k('rr:' .. m)) ~= 'none' then return end
  redis.call('ZREM', k('runs'), m)
  if string.sub(m, 1, 2) == 'l:' then
    local slot = string.sub(m, 3)
    if kind(k('run:' .. slot)) == 'hash' then redis.call('DEL', k('run:' .. slot)) end
    redis.call('ZREM', k('live'), slot)
  end
end
local function prune(size, ttl, now)
  if size < 1 then size = 1 end
  local touched = {}
  for _, m in ipairs(redis.call('ZRANGE', k('runs'), 0, -(size + 1))) do
    if not live_run(m) then
      if kind(k('rr:' .. m)) == 'set' then
        for _, id in ipairs(redis.call('SMEMBERS', k('rr:' .. m))) do drop_row(id, m) end
      end
      touched[m] = true
    end
  end
  if ttl > 0 then
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', k('fin'), '-inf', '(' .. (now - ttl))) do
      local m = run_of(id)
      if not live_run(m) then
        drop_row(id, m)
        touched[m] = true
      end
    end
  end
  for m, _ in pairs(touched) do drop_run_if_empty(m) end
end
