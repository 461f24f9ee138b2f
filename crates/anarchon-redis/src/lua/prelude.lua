-- Shared head of every anarchon script (the Rust side prepends it).
-- ARGV[1] is the job's key base (`<prefix>{<job>}:`, or '' for scripts that span jobs) and
-- ARGV[2] the command deadline on the server clock (0 = none): a write that reaches the
-- server after it (a command replayed after a reconnect, or one the client already gave up
-- on) has no effect.
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
local function kind(key) return redis.call('TYPE', key)['ok'] end
-- A key anarchon would touch holds something it did not write: stop before any write.
local function want(key, t)
  local got = kind(key)
  if got ~= 'none' and got ~= t then
    error({err = 'ANARCHON_WRONGTYPE ' .. got .. ' ' .. t .. ' <' .. key .. '>'})
  end
end
-- Ends an attempt's history row if it is still running.
local function row_end(id, st, now, err)
  local rk = k('row:' .. id)
  if redis.call('HGET', rk, 'st') == 'running' then
    redis.call('HSET', rk, 'st', st, 'fin', now, 'err', err)
    redis.call('ZADD', k('fin'), now, id)
  end
end
