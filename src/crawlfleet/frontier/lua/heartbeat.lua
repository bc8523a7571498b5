-- heartbeat: a node says it is alive (and whether it is busy), renews the leases it
-- holds, and reads the job's state, all on the Redis clock.
-- uses: counters, batch, clock
--
-- KEYS[1] nodes     zset  node id -> time (ms) after which it counts as dead
-- KEYS[2] nodeinfo  hash  node id -> JSON status written by the node
-- KEYS[3] busy      zset  node id -> time (ms) until which it counts as busy
-- KEYS[4] leases    zset  rid -> lease deadline (ms)
-- KEYS[5] owner     hash  rid -> node id
-- KEYS[6] waiting   zset  rid -> due time (ms) of the requests waiting for their time
--                   (see commit.lua)
-- KEYS[7] counters  hash
-- KEYS[8] limits    hash  site pattern -> rate limit set at run time
-- KEYS[9] reaped    zset  node id -> time its leases were returned (see expired.lua)
-- KEYS[10] control  hash  "<scope>:<kind>" -> command JSON (see frontier/control.py)
-- KEYS[11] fleet_limits  hash  site pattern -> rate limit every job shares, set at run
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
-- Returns {now_ms, queued, leased (nodes' leases and requests waiting), live nodes,
--          busy live nodes other than this one, renewed,
--          {pattern, limit, ...} the job's run-time rate limits,
--          {the control fields *:state, *:concurrency, <node>:state,
--           <node>:concurrency; nil where unset},
--          requests ever leased in the job (0: it never had work),
--          {pattern, limit, ...} the fleet's run-time rate limits,
--          requests waiting for their time (counted in leased: retries backing off,
--          tracked requests between visits)}

local nodes_key, nodeinfo_key, busy_key, leases_key, owner_key, waiting_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local counters_key, limits_key, reaped_key, control_key = KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local fleet_limits_key = KEYS[11]  -- nil on a Redis Cluster
local now = now_ms()
local node, ttl, info, busy = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local lease_ms = tonumber(ARGV[5])
local beat_at = tonumber(redis.call('HGET', counters_key, 'beat_at') or '0') or 0
if now - beat_at > ttl then redis.call('HSET', counters_key, 'resumed_at', now) end
redis.call('HSET', counters_key, 'beat_at', now)
if info == 'leaving' then
  redis.call('ZREM', nodes_key, node)
  redis.call('HDEL', nodeinfo_key, node)
  redis.call('ZREM', busy_key, node)
else
  redis.call('ZADD', nodes_key, now + ttl, node)
  redis.call('HSET', nodeinfo_key, node, info)
  redis.call('ZREM', reaped_key, node)
  if busy == '1' then
    redis.call('ZADD', busy_key, now + ttl, node)
  else
    redis.call('ZREM', busy_key, node)
  end
end
-- the leases still this node's get the new deadline: their owners read at once, the
-- deadlines set in one call (a few calls per thousand rids, not two a lease)
local deadline = string.format('%.0f', now + lease_ms)
local mine, renew = owned_by(owner_key, node, ARGV, 6, #ARGV), {}
for _, rid in ipairs(mine) do
  renew[#renew + 1] = deadline
  renew[#renew + 1] = rid
end
call_batched(renew, 'ZADD', leases_key, 'XX')
local renewed = #mine
-- forget nodes dead for over an hour, so the registry does not grow without bound
local gone = redis.call('ZRANGEBYSCORE', nodes_key, '-inf', now - 3600000)
for _, old in ipairs(gone) do
  redis.call('ZREM', nodes_key, old)
  redis.call('HDEL', nodeinfo_key, old)
  redis.call('ZREM', reaped_key, old)
end
redis.call('ZREMRANGEBYSCORE', busy_key, '-inf', now)
local busy_others = redis.call('ZCOUNT', busy_key, now, '+inf')
if busy == '1' and info ~= 'leaving' then busy_others = busy_others - 1 end
local queued = counter(counters_key, 'queued')
local leased = redis.call('ZCARD', leases_key) + redis.call('ZCARD', waiting_key)
return {now, queued, leased, redis.call('ZCOUNT', nodes_key, now, '+inf'),
        busy_others, renewed, redis.call('HGETALL', limits_key),
        redis.call('HMGET', control_key, '*:state', '*:concurrency', node .. ':state',
                   node .. ':concurrency'),
        counter(counters_key, 'leased_total'),
        fleet_limits_key and redis.call('HGETALL', fleet_limits_key) or {},
        counter(counters_key, 'waiting')}
