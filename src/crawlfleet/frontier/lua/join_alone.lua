-- join_alone: a node joins a job only if no other node is alive on it (a node about to
-- reset the job at its start: SCHEDULER_FLUSH_ON_START). Check and join are one step,
-- so of nodes starting together one joins and the others see it.
-- uses: clock
--
-- KEYS[1] nodes  zset  node id -> time (ms) after which it counts as dead
-- ARGV[1] node id    ARGV[2] node time-to-live (ms)
-- Returns the other nodes alive (none: this node is now registered, alive for ARGV[2]).

local nodes_key = KEYS[1]
local now = now_ms()
local alive = redis.call('ZRANGEBYSCORE', nodes_key, now, '+inf')
local others = {}
for i = 1, #alive do
  if alive[i] ~= ARGV[1] then
    others[#others + 1] = alive[i]
  end
end
if #others == 0 then
  redis.call('ZADD', nodes_key, now + tonumber(ARGV[2]), ARGV[1])
end
return others
