-- Graceful handover. ARGV: 3 slot, 4 attempt, 5 owner, 6 channel, 7 message.
-- Returns {1, now} done, {0} lost, {-2} deadline passed. Publishes the release.
local slot = ARGV[3]
local now = now_ms()
if expired(now) then return {-2} end
local rk = k('run:' .. slot)
local id = 'l:' .. slot .. '|' .. ARGV[4]
want(rk, 'hash'); want(k('row:' .. id), 'hash'); want(k('fin'), 'zset')
local r = redis.call('HMGET', rk, 'st', 'att', 'own')
if r[1] ~= 'running' or r[2] ~= ARGV[4] or r[3] == '' or r[3] ~= ARGV[5] then return {0} end
redis.call('HSET', rk, 'own', '', 'exp', now, 'ho', '1')
row_end(id, 'interrupted', now, 'handed over')
redis.call('PUBLISH', ARGV[6], ARGV[7])
return {1, now}
