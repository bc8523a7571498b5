-- commit: one batch from a node: acknowledge finished leases, set malformed entries
-- aside, and queue new requests whose fingerprint the seen-filter has not seen.
-- uses: seen, counters, clock
--
-- KEYS[1] sites     zset  site -> serve order (see lease.lua)
-- KEYS[2] req       hash  rid -> "<score>\0<site>\0<payload>" (see _entry.lua)
-- KEYS[3] leases    zset  rid -> lease deadline (ms, Redis clock)
-- KEYS[4] owner     hash  rid -> node id
-- KEYS[5] counters  hash  seq, queued, leased, enqueued, duplicates, acked, bad, ...
-- KEYS[6] bad       list  malformed entries, kept for inspection
-- KEYS[7 .. 6+S]    seen-filter keys (S = ARGV[2]; layout per seen library)
-- KEYS[7+S ..]      two keys per site: its queue (zset rid -> score, -priority * 2^32
--                   + seq) and its FIFO list of priority-0 requests ("<rid>\0<payload>"
--                   items: no req entry while queued, the lean form of most requests)
--
-- ARGV[1] node id     ARGV[2] S     ARGV[3] P (seen parameters)
-- ARGV[4] A (acks)    ARGV[5] B (malformed)     ARGV[6] R (requests)
-- ARGV[7] the holder of waiting requests (records.WAITING)
-- ARGV[8] K: duplicates the node found itself (its cache of fingerprints this filter
--         holds), counted only if ARGV[9] is the job's epoch
-- ARGV[9] the job's epoch the node's cache belongs to ("": none yet)
-- then P seen parameters, A rids to acknowledge, B rids to set aside,
-- then R groups of 6: fingerprint ("" = bypass the seen-filter), queue index
-- (1-based among the sites: its keys are the (2i-1)-th and 2i-th queue keys), site,
-- priority, payload, delay (ms; 0: none).
-- A request with a delay waits before it is queued (a retry's back-off): it is held
-- as a lease of the waiting holder until now + delay, so that whoever reclaims
-- expired leases (expired.lua, requeue.lua) queues it once its time has come; it
-- counts as leased and as "waiting".
--
-- The job's epoch (counters field "epoch") names this incarnation of the job: set by
-- the first commit, from Redis's clock in µs, and gone with the counters when the job
-- is reset, so that a node can tell its cache of seen fingerprints is stale.
--
-- Returns {queued (waiting included), duplicates (found here), acked, {1-based indexes
--          of duplicate requests}, new bloom layers, the job's epoch, K if counted else
--          0} (wrapped with the counters' repairs: see _counters.lua)
-- An ack is applied only if the lease is still this node's (a reclaimed lease is
-- left to its new holder or queue).

local sites_key, req_key, leases_key, owner_key, counters_key, bad_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local node, waiting_holder = ARGV[1], ARGV[7]
local S, P, A, B, R = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]),
                      tonumber(ARGV[5]), tonumber(ARGV[6])
local seen_keys, seen_args = {}, {}
for i = 1, S do seen_keys[i] = KEYS[6 + i] end
for i = 1, P do seen_args[i] = ARGV[9 + i] end
seen_init(seen_keys, seen_args)
local qbase = 6 + S
local pos = 10 + P

local epoch = redis.call('HGET', counters_key, 'epoch')
if not epoch then
  epoch = string.format('%.0f', now_us())
  redis.call('HSET', counters_key, 'epoch', epoch)
end
local known = 0
if ARGV[9] == epoch then known = tonumber(ARGV[8]) or 0 end

-- the lease of *rid* ends if it is still this node's, its request gone for good (its
-- entry kept in the bad list if *set_aside*); whether it did
local function end_lease(rid, set_aside)
  if redis.call('HGET', owner_key, rid) ~= node then return false end
  if set_aside then
    local entry = redis.call('HGET', req_key, rid)
    if entry then redis.call('RPUSH', bad_key, entry) end
  end
  redis.call('ZREM', leases_key, rid)
  redis.call('HDEL', owner_key, rid)
  redis.call('HDEL', req_key, rid)
  return true
end

local acked, bad = 0, 0
for i = pos, pos + A - 1 do
  if end_lease(ARGV[i], false) then acked = acked + 1 end
end
for i = pos + A, pos + A + B - 1 do
  if end_lease(ARGV[i], true) then bad = bad + 1 end
end
pos = pos + A + B

local queued, waiting, dups, dup_idx = 0, 0, 0, {}
local seq = tonumber(redis.call('HGET', counters_key, 'seq') or '0')
if not seq then
  -- unreadable (a hand edit, a bug): go on from Redis's clock in µs, far above any
  -- sequence used so far, so that no request id is given twice
  seq = now_us()
  local was = redis.call('HGET', counters_key, 'seq')
  redis.call('HSET', counters_key, 'seq', string.format('%.0f', seq))
  note_repair(counters_key, 'seq', was, string.format('%.0f', seq))
end
for i = 1, R do
  local fp, qi, site, prio, payload = ARGV[pos], tonumber(ARGV[pos + 1]), ARGV[pos + 2],
                                      tonumber(ARGV[pos + 3]), ARGV[pos + 4]
  local delay = tonumber(ARGV[pos + 5]) or 0
  pos = pos + 6
  if fp ~= '' and seen_add(fp) == 0 then
    dups = dups + 1
    dup_idx[#dup_idx + 1] = i
  else
    seq = seq + 1
    local rid = string.format('%.0f', seq)
    local score = -prio * 4294967296 + (seq % 4294967296)
    if prio == 0 and delay <= 0 then
      -- the lean form: an item of the site's FIFO list, no req entry while queued
      redis.call('RPUSH', KEYS[qbase + 2 * qi], rid .. '\0' .. payload)
      redis.call('ZADD', sites_key, 'NX', 0, site)
      queued = queued + 1
    else
      redis.call('HSET', req_key, rid,
                 string.format('%.17g', score) .. '\0' .. site .. '\0' .. payload)
      if delay > 0 then
        redis.call('ZADD', leases_key, now_ms() + delay, rid)
        redis.call('HSET', owner_key, rid, waiting_holder)
        waiting = waiting + 1
      else
        redis.call('ZADD', KEYS[qbase + 2 * qi - 1], score, rid)
        redis.call('ZADD', sites_key, 'NX', 0, site)
        queued = queued + 1
      end
    end
  end
end
seen_finish()

if R > 0 then redis.call('HSET', counters_key, 'seq', string.format('%.0f', seq)) end
if queued > 0 then
  count(counters_key, 'queued', queued)
  count(counters_key, 'enqueued', queued)
end
if waiting > 0 then
  count(counters_key, 'leased', waiting)
  count(counters_key, 'waiting', waiting)
  count(counters_key, 'enqueued', waiting)
end
if dups + known > 0 then count(counters_key, 'duplicates', dups + known) end
if acked + bad > 0 then count(counters_key, 'leased', -(acked + bad)) end
if acked > 0 then count(counters_key, 'acked', acked) end
if bad > 0 then count(counters_key, 'bad', bad) end
return {queued + waiting, dups, acked, dup_idx, seen_new_layers(), epoch, known}
