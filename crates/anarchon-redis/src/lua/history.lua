-- History of a job, newest first. ARGV: 3 count. Returns {{field, value ...} ...}, the
-- newest `count` rows plus any that tie with the last one on started_at (sorted by caller).
-- A lease attempt's row is read from its run hash and returned with the field names of a
-- row hash (slot, sched, inst, man, att, rsn, st, fence, start, fin, err).
local hist = k('hist')
local n = tonumber(ARGV[3])
local out = {}
if n <= 0 then return out end
local ids = on(hist, 'zset', 'ZRANGE', hist, 0, n - 1, 'WITHSCORES')
local list, seen = {}, {}
for i = 1, #ids, 2 do
  list[#list + 1] = ids[i]
  seen[ids[i]] = true
end
if #list == n then
  local last = ids[#ids]
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', hist, last, last)) do
    if not seen[id] then list[#list + 1] = id end
  end
end
for _, id in ipairs(list) do
  local slot, att = string.match(id, '^l:([^|]*)|(.*)$')
  if slot then
    local rk = k('run:' .. slot)
    local r = on(rk, 'hash', 'HMGET', rk, 'sched', att .. 'i', att .. 'r', att .. 's',
      att .. 'f', att .. 't', att .. 'e', att .. 'x')
    if r[2] then
      local f = {'slot', slot, 'sched', r[1], 'inst', r[2], 'man', '0', 'att', att, 'rsn', r[3],
        'st', r[4], 'fence', r[5], 'start', r[6]}
      if r[7] then f[#f + 1] = 'fin'; f[#f + 1] = r[7] end
      if r[8] then f[#f + 1] = 'err'; f[#f + 1] = r[8] end
      out[#out + 1] = f
    end
  else
    local rk = k('row:' .. id)
    local f = on(rk, 'hash', 'HGETALL', rk)
    if #f > 0 then out[#out + 1] = f end
  end
end
return out
