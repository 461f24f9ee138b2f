-- Inserts or replaces one history row (manual runs; claim-only attempts) in its own hash
-- `row:<id>`, listed in the run's set `rr:<run>`.
-- ARGV: 3 row id, 4 run member, 5 run score (slot), 6 size, 7 ttl ms, 8 started_at,
-- 9 finished_at ('' = none), 10.. field, value pairs. Returns {1, now}.
local now = now_ms()
local id, m = ARGV[3], ARGV[4]
local row = k('row:' .. id)
want(row, 'hash'); want(k('hist'), 'zset'); want(k('fin'), 'zset'); want(k('runs'), 'zset')
want(k('rr:' .. m), 'set'); want(k('live'), 'zset')
redis.call('DEL', row)
redis.call('HSET', row, unpack(ARGV, 10))
redis.call('ZADD', k('hist'), -tonumber(ARGV[8]), id)
if ARGV[9] ~= '' then
  redis.call('ZADD', k('fin'), -tonumber(ARGV[9]), id)
else
  redis.call('ZREM', k('fin'), id)
end
redis.call('SADD', k('rr:' .. m), id)
redis.call('ZADD', k('runs'), -tonumber(ARGV[5]), m)
prune(tonumber(ARGV[6]), tonumber(ARGV[7]), now)
return {1, now}
