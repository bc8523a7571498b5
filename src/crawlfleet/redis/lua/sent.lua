-- sent: a node has just sent requests of rate-limited budgets: their pace counts from
-- now (the Redis clock) rather than from the lease, so that a request that waited in
-- its node before going out does not let the next one follow it too closely.
--
-- KEYS[1] pace  hash  budget -> time (ms) of its last request (see lease.lua)
-- ARGV budgets
-- Returns the number of budgets moved forward.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local moved = 0
for i = 1, #ARGV do
  local last = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0')
  if now > last then
    redis.call('HSET', KEYS[1], ARGV[i], now)
    moved = moved + 1
  end
end
return moved
