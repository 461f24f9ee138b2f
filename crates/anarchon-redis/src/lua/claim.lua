-- Lease claim. ARGV: 3 slot, 4 not_after, 5 lease_ms, 6 owner, 7 overlap skip (1/0),
-- 8 reason, 9 scheduled_at, 10 history size, 11 history ttl ms (0 = none).
-- Returns {1, now, fence, expires} won, {0, now} taken, {-1, now} late,
-- {2, running_slot} overlap, {-2, now} command deadline passed.
local slot = ARGV[3]
local now = now_ms()
if expired(now) then return {-2, now} end
if now > tonumber(ARGV[4]) then return {-1, now} end
local rk = k('run:' .. slot)
local id = 'l:' .. slot .. '|1'
want(rk, 'hash'); want(k('runs'), 'zset'); want(k('live'), 'zset'); want(k('fence'), 'string')
want(k('hist'), 'zset'); want(k('fin'), 'zset'); want(k('rr:l:' .. slot), 'set')
want(k('row:' .. id), 'hash')
-- Read pass over the job's earlier unfinished runs (no write before every check passed).
local ended, holder = {}, nil
for _, s in ipairs(redis.call('ZRANGEBYSCORE', k('live'), '-inf', '(' .. slot)) do
  local ek = k('run:' .. s)
  want(ek, 'hash')
  local r = redis.call('HMGET', ek, 'st', 'att', 'own', 'exp')
  if r[1] == 'running' then
    if r[3] == '' or tonumber(r[4]) <= now then
      want(k('row:l:' .. s .. '|' .. r[2]), 'hash')
      ended[#ended + 1] = {s, r[2]}
    elseif holder == nil then
      holder = s
    end
  end
end
-- [B-15] earlier runs whose lease ended unfinished are replaced by this slot.
for _, e in ipairs(ended) do
  redis.call('HSET', k('run:' .. e[1]), 'st', 'interrupted', 'own', '')
  redis.call('ZREM', k('live'), e[1])
  row_end('l:' .. e[1] .. '|' .. e[2], 'interrupted', now, 'replaced by the next slot')
end
if redis.call('EXISTS', rk) == 1 then return {0, now} end
if ARGV[7] == '1' and holder ~= nil then return {2, tonumber(holder)} end
local fence = redis.call('INCR', k('fence'))
local exp = now + tonumber(ARGV[5])
redis.call('HSET', rk, 'st', 'running', 'att', '1', 'starts', '1', 'own', ARGV[6],
  'exp', exp, 'sched', ARGV[9], 'fence', fence)
redis.call('ZADD', k('live'), slot, slot)
redis.call('HSET', k('row:' .. id), 'slot', slot, 'sched', ARGV[9], 'inst', ARGV[6], 'man', '0',
  'att', '1', 'rsn', ARGV[8], 'st', 'running', 'fence', fence, 'start', now)
redis.call('ZADD', k('hist'), now, id)
redis.call('SADD', k('rr:l:' .. slot), id)
redis.call('ZADD', k('runs'), slot, 'l:' .. slot)
prune(tonumber(ARGV[10]), tonumber(ARGV[11]), now)
return {1, now, fence, exp}
