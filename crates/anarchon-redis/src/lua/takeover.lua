-- Takeover by a backup. KEYS[1]: the run hash. ARGV: 3 slot, 4 seen attempt, 5 owner,
-- 6 lease_ms, 7 max_attempts, 8 superseded (1/0). Returns {1, now, fence, expires,
-- scheduled_at} won, {0} live, {3, status} finished, {4} interrupted, {5} exhausted,
-- {-2} deadline passed.
local slot = ARGV[3]
local now = now_ms()
if expired(now) then return {-2} end
local seen = tonumber(ARGV[4])
local rk = KEYS[1]
local r = on(rk, 'hash', 'HMGET', rk, 'st', 'att', 'own', 'exp', 'starts', 'sched')
if not r[1] then return {3, 'interrupted'} end
if r[1] ~= 'running' then return {3, r[1]} end
local released = r[3] == ''
if tonumber(r[2]) ~= seen or ((not released) and tonumber(r[4]) > now) then return {0} end
want(k('live'), 'zset'); want(k('fence'), 'string'); want(k('hist'), 'zset')
want(k('fin'), 'zset')
row_end(slot, r[2], 'interrupted', now, 'lease expired')
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
redis.call('HSET', rk, 'att', att, 'starts', counted, 'own', ARGV[5], 'exp', exp, 'ho', '0',
  att .. 'i', ARGV[5], att .. 'r', 'takeover', att .. 's', 'running', att .. 'f', fence,
  att .. 't', now)
redis.call('ZADD', k('hist'), -now, 'l:' .. slot .. '|' .. att)
return {1, now, fence, exp, tonumber(r[6])}
