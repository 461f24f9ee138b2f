-- Owner's finish. ARGV: 3 slot, 4 attempt, 5 owner, 6 status, 7 error, 8 has error (1/0),
-- 9 history size, 10 history ttl ms. Returns {1, now} done, {0} lost, {-2} deadline passed.
local slot = ARGV[3]
local now = now_ms()
if expired(now) then return {-2} end
local rk = k('run:' .. slot)
local id = 'l:' .. slot .. '|' .. ARGV[4]
local row = k('row:' .. id)
want(rk, 'hash'); want(row, 'hash'); want(k('runs'), 'zset'); want(k('live'), 'zset')
want(k('hist'), 'zset'); want(k('fin'), 'zset')
local r = redis.call('HMGET', rk, 'st', 'att', 'own')
if r[1] ~= 'running' or r[2] ~= ARGV[4] or r[3] == '' or r[3] ~= ARGV[5] then return {0} end
redis.call('HSET', rk, 'st', ARGV[6], 'own', '')
redis.call('ZREM', k('live'), slot)
if redis.call('EXISTS', row) == 1 then
  redis.call('HSET', row, 'st', ARGV[6], 'fin', now)
  if ARGV[8] == '1' then redis.call('HSET', row, 'err', ARGV[7]) else redis.call('HDEL', row, 'err') end
  redis.call('ZADD', k('fin'), now, id)
end
prune(tonumber(ARGV[9]), tonumber(ARGV[10]), now)
return {1, now}
