-- Shared head of every anarchon script (the Rust side prepends it).
-- ARGV[1] is the job's key base (`<prefix>{<job>}:`, or '' for scripts that span jobs) and
-- ARGV[2] the command deadline on the server clock (0 = none): a write that reaches the
-- server after it (a command replayed after a reconnect, or one the client already gave up
-- on) has no effect.
--
-- Key format 2. A lease run is one hash `run:<slot>` holding the run's fields and, per
-- attempt n, its history row as the fields `<n>i` instance, `<n>r` reason, `<n>s` status,
-- `<n>f` fence, `<n>t` started, `<n>e` finished, `<n>x` error. The job's zsets `runs`
-- (runs by slot), `hist` (row ids by start) and `fin` (finished row ids by end) are scored
-- by the *negated* time: the newest entry goes to the head of a small (listpack) zset
-- instead of after a scan of all of it.
--
-- Every `redis.call` costs about half a microsecond of script overhead, so the hot paths
-- make as few as they can; helpers used only on rare paths are defined where they are used.
if redis.replicate_commands then redis.replicate_commands() end
local B = ARGV[1]
local function k(s) return B .. s end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function expired(now)
  local d = tonumber(ARGV[2])
  return d > 0 and now > d
end
-- A key anarchon would touch holds something it did not write: stop before any write.
local function want(key, t)
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= t then
    error({err = 'ANARCHON_WRONGTYPE ' .. got .. ' ' .. t .. ' <' .. key .. '>'})
  end
end
-- Runs a command on `key` that fails on a key of the wrong type (a read, or a script's
-- first write), so the command itself is the type check: the failure is reported as
-- ANARCHON_WRONGTYPE naming the key instead of a bare WRONGTYPE.
local function on(key, t, ...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'WRONGTYPE', 1, true) then want(key, t) end
    error(r)
  end
  return r
end
-- Ends attempt `att` of the lease run `slot` if its row is still running.
local function row_end(slot, att, st, now, err)
  local rk = k('run:' .. slot)
  if redis.call('HGET', rk, att .. 's') == 'running' then
    redis.call('HSET', rk, att .. 's', st, att .. 'e', now, att .. 'x', err)
    redis.call('ZADD', k('fin'), -now, 'l:' .. slot .. '|' .. att)
  end
end
