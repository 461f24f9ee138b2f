-- Graceful handover. KEYS[1]: the run hash. ARGV: 3 slot, 4 attempt, 5 owner, 6 channel,
-- 7 message. Returns {1, now} done, {0} lost, {-2} deadline passed. Publishes the release.
local slot, att = ARGV[3], ARGV[4]
local now = now_ms()
if expired(now) then return {-2} end
local rk = KEYS[1]
local r = on(rk, 'hash', 'HMGET', rk, 'st', 'att', 'own', att .. 's')
if r[1] ~= 'running' or r[2] ~= att or r[3] == '' or r[3] ~= ARGV[5] then return {0} end
want(k('fin'), 'zset')
if r[4] == 'running' then
  redis.call('HSET', rk, 'own', '', 'exp', now, 'ho', '1', att .. 's', 'interrupted',
    att .. 'e', now, att .. 'x', 'handed over')
  redis.call('ZADD', k('fin'), -now, 'l:' .. slot .. '|' .. att)
else
  redis.call('HSET', rk, 'own', '', 'exp', now, 'ho', '1')
end
redis.call('PUBLISH', ARGV[6], ARGV[7])
return {1, now}
