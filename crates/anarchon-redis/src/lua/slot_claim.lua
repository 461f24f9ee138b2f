-- Claim-only `script` strategy [B-25]: checks the job's stream for the slot and appends it
-- if absent. ARGV: 3 slot, 4 not_after, 5 instance, 6 max stream length.
-- Returns {1, now} won, {0, now} taken, {-1, now} late, {-2, now} deadline passed.
local slot = ARGV[3]
local now = now_ms()
if expired(now) then return {-2, now} end
if now > tonumber(ARGV[4]) then return {-1, now} end
local sk = k('claims')
want(sk, 'stream')
if #redis.call('XRANGE', sk, slot .. '-0', slot .. '-18446744073709551615', 'COUNT', 1) > 0 then
  return {0, now}
end
-- Entries are ordered by slot: a slot older than the newest claimed one cannot be appended
-- and counts as taken (an instance only ever claims the newest due slot).
local top = redis.call('XREVRANGE', sk, '+', '-', 'COUNT', 1)
if #top > 0 then
  local ms = tonumber(string.match(top[1][1], '^(%d+)'))
  if ms >= tonumber(slot) then return {0, now} end
end
redis.call('XADD', sk, 'MAXLEN', '~', ARGV[6], slot .. '-1', 'i', ARGV[5])
return {1, now}
