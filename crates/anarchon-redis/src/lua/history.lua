-- History of a job, newest first. ARGV: 3 count. Returns {{field, value ...} ...}, the
-- newest `count` rows plus any that tie with the last one on started_at (sorted by caller).
want(k('hist'), 'zset')
local n = tonumber(ARGV[3])
local out = {}
if n <= 0 then return out end
local ids = redis.call('ZREVRANGE', k('hist'), 0, n - 1, 'WITHSCORES')
local list, seen = {}, {}
for i = 1, #ids, 2 do
  list[#list + 1] = ids[i]
  seen[ids[i]] = true
end
if #list == n then
  local last = ids[#ids]
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', k('hist'), last, last)) do
    if not seen[id] then list[#list + 1] = id end
  end
end
for _, id in ipairs(list) do
  local rk = k('row:' .. id)
  want(rk, 'hash')
  local f = redis.call('HGETALL', rk)
  if #f > 0 then out[#out + 1] = f end
end
return out
