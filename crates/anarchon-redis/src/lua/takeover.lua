-- Takeover by a backup. ARGV: 3 slot, 4 seen attempt, 5 owner, 6 lease_ms, 7 max_attempts,
-- 8 superseded (1/0). Returns {1, now, fence, expires, scheduled_at} won, {0} live,
-- {3, status} finished, {4} interrupted, {5} exhausted, {-2} deadline passed.
local slot = ARGV[3]
local now = now_ms()
if expired(now) then return {-2} end
local seen = tonumber(ARGV[4])
local rk = k('run:' .. slot)
want(rk, 'hash'); want(k('live'), 'zset'); want(k('fence'), 'string'); want(k('hist'), 'zset')
want(k('fin'), 'zset'); want(k('rr:l:' .. slot), 'set')
want(k('row:l:' .. slot .. '|' .. seen), 'hash'); want(k('row:l:' .. slot .. '|' .. (seen + 1)), 'hash')
local r = redis.call('HMGET', rk, 'st', 'att', 'own', 'exp', 'starts', 'sched')
if not r[1] then return {3, 'interrupted'} end
if r[1] ~= 'running' then return {3, r[1]} end
local released = r[3] == ''
if tonumber(r[2]) ~= seen or ((not released) and tonumber(r[4]) > now) then return {0} end
row_end('l:' .. slot .. '|' .. r[2], 'interrupted', now, 'lease expired')
if ARGV[8] == '1' then
  redis.call('HSET', rk, 'st', 'interrupted', 'own', '')
  redis.call('ZREM', k('live'), slot)
  return {4}
end
local counted = tonumber(r[5])
if not released then counted = counted + 1 end
if counted > tonumber(ARGV[7]) then
  redis.call('HSET', rk, 'st', 'failed', 'own', '', 'err', 'exhausted')
  redis.call('ZREM', k('live'), slot)
  return {5}
end
local fence = redis.call('INCR', k('fence'))
local att = seen + 1
local exp = now + tonumber(ARGV[6])
redis.call('HSET', rk, 'att', att, 'starts', counted, 'own', ARGV[5], 'exp', exp, 'fence', fence, 'ho', '0')
local id = 'l:' .. slot .. '|' .. att
redis.call('HSET', k('row:' .. id), 'slot', slot, 'sched', r[6], 'inst', ARGV[5], 'man', '0',
  'att', att, 'rsn', 'takeover', 'st', 'running', 'fence', fence, 'start', now)
redis.call('ZADD', k('hist'), now, id)
redis.call('SADD', k('rr:l:' .. slot), id)
return {1, now, fence, exp, tonumber(r[6])}
