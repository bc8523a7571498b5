-- heartbeat: a node says it is alive (and whether it is busy), renews the leases it
-- holds, and reads the job's state, all on the Redis clock.
-- uses: counters, clock
--
-- KEYS[1] nodes     zset  node id -> time (ms) after which it counts as dead
-- KEYS[2] nodeinfo  hash  node id -> JSON status written by the node
-- KEYS[3] busy      zset  node id -> time (ms) until which it counts as busy
-- KEYS[4] leases    zset  rid -> lease deadline (ms)
-- KEYS[5] owner     hash  rid -> node id
-- KEYS[6] counters  hash
-- KEYS[7] limits    hash  site pattern -> rate limit set at run time
-- KEYS[8] reaped    zset  node id -> time its leases were returned (see expired.lua)
-- KEYS[9] control   hash  "<scope>:<kind>" -> command JSON (see frontier/control.py)
-- KEYS[10] fleet limits  hash  site pattern -> rate limit every job shares, set at run
--                         time (left out on a Redis Cluster, where it is in another
--                         slot: the client reads it apart)
-- (counters: "beat_at", the last heartbeat of any node (ms); "resumed_at", when the
--  fleet was heard from again after a silence longer than a node's time-to-live: a
--  Redis outage or hang, or a full stop; see expired.lua)
--
-- ARGV[1] node id   ARGV[2] node time-to-live (ms)   ARGV[3] status JSON
-- ARGV[4] busy: "1" or "0"      ARGV[5] lease length (ms)
-- ARGV[6 ..] rids this node holds: their deadline moves to now + lease length
-- ("leaving" as ARGV[3] removes the node instead: it is stopping cleanly)
-- Returns {now_ms, queued, leased, live nodes, busy live nodes other than this one,
--          renewed, {pattern, limit, ...} the job's run-time rate limits,
--          {the control fields *:state, *:concurrency, <node>:state,
--           <node>:concurrency; nil where unset},
--          requests ever leased in the job (0: it never had work),
--          {pattern, limit, ...} the fleet's run-time rate limits}

local now = now_ms()
local node, ttl, info, busy = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local lease_ms = tonumber(ARGV[5])
local beat_at = tonumber(redis.call('HGET', KEYS[6], 'beat_at') or '0') or 0
if now - beat_at > ttl then redis.call('HSET', KEYS[6], 'resumed_at', now) end
redis.call('HSET', KEYS[6], 'beat_at', now)
if info == 'leaving' then
  redis.call('ZREM', KEYS[1], node)
  redis.call('HDEL', KEYS[2], node)
  redis.call('ZREM', KEYS[3], node)
else
  redis.call('ZADD', KEYS[1], now + ttl, node)
  redis.call('HSET', KEYS[2], node, info)
  redis.call('ZREM', KEYS[8], node)
  if busy == '1' then
    redis.call('ZADD', KEYS[3], now + ttl, node)
  else
    redis.call('ZREM', KEYS[3], node)
  end
end
local renewed = 0
for i = 6, #ARGV do
  if redis.call('HGET', KEYS[5], ARGV[i]) == node then
    redis.call('ZADD', KEYS[4], 'XX', now + lease_ms, ARGV[i])
    renewed = renewed + 1
  end
end
-- forget nodes dead for over an hour, so the registry does not grow without bound
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - 3600000)
for _, old in ipairs(gone) do
  redis.call('ZREM', KEYS[1], old)
  redis.call('HDEL', KEYS[2], old)
  redis.call('ZREM', KEYS[8], old)
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local busy_others = redis.call('ZCOUNT', KEYS[3], now, '+inf')
if busy == '1' and info ~= 'leaving' then busy_others = busy_others - 1 end
local queued = counter(KEYS[6], 'queued')
return {now, queued, redis.call('ZCARD', KEYS[4]), redis.call('ZCOUNT', KEYS[1], now, '+inf'),
        busy_others, renewed, redis.call('HGETALL', KEYS[7]),
        redis.call('HMGET', KEYS[9], '*:state', '*:concurrency', node .. ':state',
                   node .. ':concurrency'),
        counter(KEYS[6], 'leased_total'), KEYS[10] and redis.call('HGETALL', KEYS[10]) or {}}
