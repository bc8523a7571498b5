-- expired: list the requests to return to their queues (read only, except for marking
-- dead nodes as reaped): waiting requests whose time has come, leases past their
-- deadline on the Redis clock, and every lease of a node that missed its heartbeats (it
-- counts as dead: its registry time has passed), so that a crashed node's work comes
-- back at once, not only at lease expiry.
-- uses: entry, clock
--
-- KEYS[1] leases    zset  rid -> lease deadline (ms)
-- KEYS[2] req       hash  rid -> "<score>\0<site>\0<payload>"
-- KEYS[3] nodes     zset  node id -> time (ms) after which it counts as dead
-- KEYS[4] owner     hash  rid -> node id (leases only: a waiting request has none)
-- KEYS[5] reaped    zset  node id -> time (ms) its leases were listed here
-- KEYS[6] counters  hash  "resumed_at": when the fleet was heard from again after a
--                         silence (heartbeat.lua)
-- KEYS[7] waiting   zset  rid -> due time (ms) of the requests waiting for their time
--                         (see commit.lua): read by score, never whole
-- ARGV[1] most leases to return (and most waiting requests: up to twice this in all)
-- ARGV[2] grace (ms): for this long after the fleet was silent (Redis was down or
--         hung: no node could heartbeat), no node's lease is returned, so that live
--         nodes renew their leases before anyone counts them dead
-- ARGV[3] the holder of waiting requests of the former form (records.WAITING: a lease
--         of that holder, kept by a Redis that was upgraded with them in flight): they
--         are listed once their time has come, grace or not, as those of the waiting set
-- Returns {rid, site, rid, site, ...}; site is "" for an entry whose request is gone
-- or malformed (requeue.lua sets a malformed one aside).
-- The caller passes these to requeue.lua (mode "expired") with the sites' queue keys;
-- requeue checks again, so a lease renewed in between, or a node that came back, is
-- left alone. A dead node is marked reaped once all its leases were listed; it is
-- looked at again only if it heartbeats again and then dies again. Its leases are
-- found in the owner hash, which holds leases in flight only (waiting requests are not
-- there), so that this scan is bounded by the work in flight, not by what is tracked.

local leases_key, req_key, nodes_key, owner_key, reaped_key, counters_key, waiting_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local now = now_ms()
local limit = tonumber(ARGV[1])
local resumed = tonumber(redis.call('HGET', counters_key, 'resumed_at') or '0') or 0
local in_grace = now - resumed < tonumber(ARGV[2])
local waiting_holder = ARGV[3]
local picked, out = {}, {}

local function add(rid)
  if picked[rid] or #out >= 2 * limit then return end
  picked[rid] = true
  local _, site = entry_parts(redis.call('HGET', req_key, rid))
  out[#out + 1] = rid
  out[#out + 1] = site or ''
end

-- waiting requests whose time has come, grace or not (nobody renews them)
for _, rid in ipairs(redis.call('ZRANGEBYSCORE', waiting_key, '-inf', '(' .. now,
                                'LIMIT', 0, limit)) do
  add(rid)
end
local due = redis.call('ZRANGEBYSCORE', leases_key, '-inf', '(' .. now, 'LIMIT', 0, limit)
for _, rid in ipairs(due) do
  if not in_grace or redis.call('HGET', owner_key, rid) == waiting_holder then add(rid) end
end
if in_grace then return out end

local dead = {}
local found = false
for _, node in ipairs(redis.call('ZRANGEBYSCORE', nodes_key, '-inf', '(' .. now)) do
  if not redis.call('ZSCORE', reaped_key, node) then
    dead[node] = true
    found = true
  end
end
if found then
  local owners = redis.call('HGETALL', owner_key)
  for i = 1, #owners, 2 do
    if dead[owners[i + 1]] then add(owners[i]) end
  end
  if #out < 2 * limit then
    for node in pairs(dead) do redis.call('ZADD', reaped_key, now, node) end
  end
end
return out
