-- Owner's finish. KEYS[1]: the run hash. ARGV: 3 slot, 4 attempt, 5 owner, 6 status,
-- 7 error, 8 has error (1/0), 9 history size, 10 history ttl ms.
-- Returns {1, now} done, {0} lost, {-2} deadline passed.
local slot, att = ARGV[3], ARGV[4]
local now = now_ms()
if expired(now) then return {-2} end
local rk = KEYS[1]
local r = on(rk, 'hash', 'HMGET', rk, 'st', 'att', 'own', att .. 's')
if r[1] ~= 'running' or r[2] ~= att or r[3] == '' or r[3] ~= ARGV[5] then return {0} end
want(k('live'), 'zset'); want(k('fin'), 'zset'); want(k('runs'), 'zset'); want(k('hist'), 'zset')
if r[4] == 'running' then
  if ARGV[8] == '1' then
    redis.call('HSET', rk, 'st', ARGV[6], 'own', '', att .. 's', ARGV[6], att .. 'e', now,
      att .. 'x', ARGV[7])
  else
    redis.call('HSET', rk, 'st', ARGV[6], 'own', '', att .. 's', ARGV[6], att .. 'e', now)
  end
  redis.call('ZADD', k('fin'), -now, 'l:' .. slot .. '|' .. att)
else
  redis.call('HSET', rk, 'st', ARGV[6], 'own', '')
end
redis.call('ZREM', k('live'), slot)
prune(tonumber(ARGV[9]), tonumber(ARGV[10]), now)
return {1, now}
