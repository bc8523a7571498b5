-- Library (prepended to scripts whose header says "-- uses: commit"; needs seen, entry,
-- counters, batch and clock): commit_run(KEYS, ARGV), the body of a commit, for
-- commit.lua and commit_lease.lua (a node's round in one call). Its KEYS and ARGV are
-- the tables it is given, as follows.
--
-- commit: one batch from a node: acknowledge finished leases, set malformed entries
-- aside, keep finished leases for a later visit (revisits) or drop tracked ones for
-- good (untracks), and queue new requests whose fingerprint the seen-filter has not
-- seen.
--
-- KEYS[1] sites     zset  site -> serve order (see lease.lua)
-- KEYS[2] req       hash  rid -> "<score>\0<site>\0<payload>" (see _entry.lua)
-- KEYS[3] leases    zset  rid -> lease deadline (ms, Redis clock)
-- KEYS[4] owner     hash  rid -> node id
-- KEYS[5] counters  hash  seq, queued, leased, enqueued, duplicates, acked, bad, ...
-- KEYS[6] waiting   zset  rid -> due time (ms, Redis clock) of the requests waiting for
--                   their time (their req entry as a lease's; no lease, no owner)
-- KEYS[7] bad       list  malformed entries, kept for inspection
-- KEYS[8] changes   stream  the job's change stream: events of revisits and untracks
--                   (one field "e"), trimmed to about ARGV[12] entries
-- KEYS[9] feed      list  the fingerprints this job's commits added to its seen-filter,
--                   oldest first, its newest ARGV[16] (about) kept; counters field
--                   "fed" counts every one ever added in this epoch (a place in the
--                   feed is that count when it was added)
-- KEYS[10 .. 9+S]   seen-filter keys (S = ARGV[2]; layout per seen library)
-- KEYS[10+S ..]     two keys per site: its queue (zset rid -> score, -priority * 2^32
--                   + seq) and its FIFO list of priority-0 requests ("<rid>\0<payload>"
--                   items: no req entry while queued, the lean form of most requests)
--
-- ARGV[1] node id     ARGV[2] S     ARGV[3] P (seen parameters)
-- ARGV[4] A (acks)    ARGV[5] B (malformed)     ARGV[6] R (requests)
-- ARGV[7] the holder of waiting requests of the former form (records.WAITING): unused
--         here (a waiting request is never a node's lease)
-- ARGV[8] K: duplicates the node found itself (its cache of fingerprints this filter
--         holds), counted only if ARGV[9] is the job's epoch
-- ARGV[9] the job's epoch the node's cache belongs to ("": none yet)
-- ARGV[10] V (revisits)    ARGV[11] U (untracks)
-- ARGV[12] most entries kept in the change stream (XADD MAXLEN ~; at least 1)
-- ARGV[13] Q (sites of the requests)
-- ARGV[14] the node's place in the feed (what it has read so far; -1: it keeps no
--          cache of seen fingerprints: the commit neither reads nor feeds the feed)
-- ARGV[15] most fingerprints read from the feed    ARGV[16] most kept in the feed
-- then P seen parameters, A rids to acknowledge, B rids to set aside,
-- then V groups of 5 (revisits): rid, delay (ms), new payload, "1" if first kept
-- (counter "tracked") else "0", event ("": none),
-- then U groups of 2 (untracks): rid, event ("": none),
-- then one argument, the requests: a MessagePack array (strings as raw, not bin: the
-- cmsgpack of Redis 7.0 reads no bin) of the Q site names (in queue index order), then
-- R groups of 3: fingerprint ("" = bypass the seen-filter), queue index (1-based among
-- the sites: its keys are the (2i-1)-th and 2i-th queue keys; its site the i-th site
-- name), payload. The queue index is "<index>:<priority>:<delay ms>" for a request at a
-- priority other than 0 or with a delay, the plain index (a number) for the common one
-- (priority 0, no delay). One argument for the batch, not a few per request: what a
-- client spends on a call is mostly per argument (a seeding's was most of its time).
-- A packed array that is not as said is refused whole before anything is written
-- (error "CFBADREQUESTS <what is wrong>").
-- A request with a delay waits before it is queued (a retry's back-off): its req entry
-- is written and its rid joins the waiting set at now + delay, so that the reclaim
-- (expired.lua, requeue.lua) queues it once its time has come; it counts as "leased"
-- (out of the queues, not finished) and as "waiting".
-- A revisit is a finished lease kept under its rid for a later visit: its lease ends
-- (leases, owner), its req entry keeps its score and site, gets the new payload and is
-- marked a revisit's (REVISIT_MARK, see _entry.lua), and it waits as a delayed request
-- does (the waiting set, due now + delay), then is queued by the same reclaim, in its
-- site's revisit list (requeue.lua; a priority-0 one lean), apart from new URLs. It
-- counts as acked, "waiting" ("leased" unchanged: a waiting request counts there) and,
-- unless kept for the first time, "revisits". An untrack ends the lease as an ack
-- does, and counts "tracked" - 1. A non-empty event of either is appended to the change
-- stream (counter "changes").
--
-- The job's epoch (counters field "epoch") names this incarnation of the job: set by
-- the first commit, from Redis's clock in µs, and gone with the counters when the job
-- is reset, so that a node can tell its cache of seen fingerprints is stale. A new
-- epoch starts with an empty feed.
--
-- The feed tells each node what the others queued, so that it drops the links they
-- already queued without asking again (most links of a real site are met on many
-- pages, by every node): before its requests are checked, the node gets up to
-- ARGV[15] fingerprints from its place on (from the oldest kept when its place is
-- older, or belongs to another epoch); the fingerprints this commit adds then join
-- the feed. A node that has read the whole feed is placed after its own.
--
-- Returns {queued (waiting included), duplicates (found here), acked (of the A acks),
--          {1-based indexes of duplicate requests}, new bloom layers, the job's epoch,
--          K if counted else 0, revisits applied, untracks applied,
--          the node's new place in the feed (-1 if ARGV[14] was), {fingerprints read}}
--          (wrapped with the counters' repairs and the entries found gone: see
--          _counters.lua, _entry.lua)
-- An ack, revisit or untrack is applied only if the lease is still this node's (a
-- reclaimed lease is left to its new holder or queue; a waiting request is nobody's).
-- A revisit whose entry is gone or malformed ends its lease instead (a malformed one
-- set aside, as B's are).

-- The requests' packed array *blob* (see above) of *Q* site names and *R* requests,
-- decoded and checked: an error "CFBADREQUESTS ..." if it is not that (the caller
-- has written nothing yet).
local function commit_requests(blob, Q, R)
  local function refuse(what)
    error('CFBADREQUESTS ' .. what, 0)
  end
  if type(blob) ~= 'string' then refuse('the packed requests are missing') end
  local ok, t = pcall(cmsgpack.unpack, blob)
  if not ok or type(t) ~= 'table' then refuse('the packed requests are not a MessagePack array') end
  if #t ~= Q + 3 * R then
    refuse(string.format('%d items packed, not %d (%d sites, %d requests)', #t, Q + 3 * R, Q, R))
  end
  for i = 1, Q do
    if type(t[i]) ~= 'string' then refuse(string.format('site %d is not a string', i)) end
  end
  for i = 1, R do
    local at = Q + 3 * i - 2
    local fp, q, payload = t[at], t[at + 1], t[at + 2]
    local qi = q
    if type(q) == 'string' then
      qi = tonumber(string.match(q, '^(%d+):%-?%d+:%d+$'))
    elseif type(q) ~= 'number' or q % 1 ~= 0 then
      qi = nil
    end
    if type(fp) ~= 'string' or type(payload) ~= 'string' or not qi or qi < 1 or qi > Q then
      refuse(string.format('request %d is not (fingerprint, queue index of 1 to %d, payload)',
                           i, Q))
    end
  end
  return t
end

local function commit_run(KEYS, ARGV)
  local sites_key, req_key, leases_key, owner_key, counters_key, waiting_key, bad_key,
        changes_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
  local node = ARGV[1]
  local S, P, A, B, R = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]),
                        tonumber(ARGV[5]), tonumber(ARGV[6])
  local V, U, maxlen = tonumber(ARGV[10]), tonumber(ARGV[11]), math.max(1, tonumber(ARGV[12]))
  local feed_key = KEYS[9]
  local seen_keys, seen_args = {}, {}
  for i = 1, S do seen_keys[i] = KEYS[9 + i] end
  for i = 1, P do seen_args[i] = ARGV[16 + i] end
  local Q = tonumber(ARGV[13])
  local pos = 17 + P
  local packed = commit_requests(ARGV[pos + A + B + 5 * V + 2 * U], Q, R)
  local site_of = {}
  for i = 1, Q do site_of[i] = packed[i] end
  seen_init(seen_keys, seen_args)
  local qbase = 9 + S

  local head = redis.call('HMGET', counters_key, 'epoch', 'fed', 'seq')
  local epoch, fed = head[1], tonumber(head[2] or '0') or 0
  if not epoch then
    epoch = string.format('%.0f', now_us())
    redis.call('HSET', counters_key, 'epoch', epoch)
    redis.call('DEL', feed_key)  -- an earlier epoch's (a reset that left it)
    fed = 0
  end
  local known = 0
  if ARGV[9] == epoch then known = tonumber(ARGV[8]) or 0 end

  -- the feed from the node's place on (see above)
  local place, feed_read, feed_kept = tonumber(ARGV[14]), tonumber(ARGV[15]), tonumber(ARGV[16])
  local feeding, feed_out = place >= 0 and feed_kept > 0, {}
  if feeding then
    if ARGV[9] ~= epoch or place > fed then place = 0 end
    if place < fed then
      local first = fed - redis.call('LLEN', feed_key)  -- the place of the oldest kept
      if place < first then place = first end
      local n = math.min(fed - place, feed_read)
      if n > 0 then
        feed_out = redis.call('LRANGE', feed_key, place - first, place - first + n - 1)
        place = place + n
      end
    end
  end
  local added = {}

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

  -- the acknowledgements in a few variadic calls, not four a lease: their owners at
  -- once, then the leases still this node's end together
  local ended = owned_by(owner_key, node, ARGV, pos, pos + A - 1)
  call_batched(ended, 'ZREM', leases_key)
  call_batched(ended, 'HDEL', owner_key)
  call_batched(ended, 'HDEL', req_key)
  local acked, bad = #ended, 0
  for i = pos + A, pos + A + B - 1 do
    if end_lease(ARGV[i], true) then bad = bad + 1 end
  end
  pos = pos + A + B

  -- a revisit's or an untrack's event, appended to the change stream
  local changes = 0
  local function note_change(event)
    if event == '' then return end
    redis.call('XADD', changes_key, 'MAXLEN', '~', maxlen, '*', 'e', event)
    changes = changes + 1
  end

  local revisited, untracked, tracked, dropped = 0, 0, 0, 0
  for _ = 1, V do
    local rid, delay, payload, new, event = ARGV[pos], tonumber(ARGV[pos + 1]) or 0,
                                            ARGV[pos + 2], ARGV[pos + 3], ARGV[pos + 4]
    pos = pos + 5
    if redis.call('HGET', owner_key, rid) == node then
      local entry = redis.call('HGET', req_key, rid)
      local score, site = entry_parts(entry)
      if score then
        -- the same score (as stored, marked) and site, the new payload
        local head = string.sub(entry, 1, string.find(entry, '\0', 1, true) - 1)
        if not entry_revisit(entry) then head = head .. REVISIT_MARK end
        redis.call('HSET', req_key, rid, head .. '\0' .. site .. '\0' .. payload)
        redis.call('ZREM', leases_key, rid)
        redis.call('HDEL', owner_key, rid)
        redis.call('ZADD', waiting_key, now_ms() + math.max(0, delay), rid)
        revisited = revisited + 1
        if new == '1' then tracked = tracked + 1 end
        note_change(event)
      elseif entry then
        end_lease(rid, true)
        bad = bad + 1
      else
        note_gone(req_key, rid)
        end_lease(rid, false)
        dropped = dropped + 1
      end
    end
  end
  for _ = 1, U do
    local rid, event = ARGV[pos], ARGV[pos + 1]
    pos = pos + 2
    if end_lease(rid, false) then
      untracked = untracked + 1
      note_change(event)
    end
  end

  local queued, waiting, dups, dup_idx = 0, 0, 0, {}
  local seq = tonumber(head[3] or '0')
  if not seq then
    -- unreadable (a hand edit, a bug): go on from Redis's clock in µs, far above any
    -- sequence used so far, so that no request id is given twice
    seq = now_us()
    local was = head[3]
    redis.call('HSET', counters_key, 'seq', string.format('%.0f', seq))
    note_repair(counters_key, 'seq', was, string.format('%.0f', seq))
  end
  -- lean items by queue index, pushed one RPUSH per site queue after the loop (in
  -- order within each site), the site registered once
  local lean, lean_order = {}, {}
  pos = Q + 1
  for i = 1, R do
    local fp, q, payload = packed[pos], packed[pos + 1], packed[pos + 2]
    pos = pos + 3
    local qi, prio, delay = q, 0, 0
    if type(q) ~= 'number' then
      local a, b, c = string.match(q, '^(%d+):(-?%d+):(%d+)$')
      qi, prio, delay = tonumber(a), tonumber(b), tonumber(c)
    end
    local site = site_of[qi]
    if fp ~= '' and seen_add(fp) == 0 then
      dups = dups + 1
      dup_idx[#dup_idx + 1] = i
    else
      if feeding and fp ~= '' then added[#added + 1] = fp end
      seq = seq + 1
      local rid = string.format('%.0f', seq)
      local score = -prio * 4294967296 + (seq % 4294967296)
      if prio == 0 and delay <= 0 then
        -- the lean form: an item of the site's FIFO list, no req entry while queued
        local items = lean[qi]
        if not items then
          items = {}
          lean[qi] = items
          lean_order[#lean_order + 1] = qi
        end
        items[#items + 1] = rid .. '\0' .. payload
        queued = queued + 1
      else
        redis.call('HSET', req_key, rid,
                   string.format('%.17g', score) .. '\0' .. site .. '\0' .. payload)
        if delay > 0 then
          redis.call('ZADD', waiting_key, now_ms() + delay, rid)
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
  -- the sites registered in one variadic call, not one a site (a seeding's batch has
  -- hundreds)
  local registered = {}
  for _, qi in ipairs(lean_order) do
    call_batched(lean[qi], 'RPUSH', KEYS[qbase + 2 * qi])
    registered[#registered + 1] = '0'
    registered[#registered + 1] = site_of[qi]
  end
  call_batched(registered, 'ZADD', sites_key, 'NX')

  if #added > 0 then
    local length = call_batched(added, 'RPUSH', feed_key)
    -- trimmed by an eighth at a time, not by each push
    if length > feed_kept + feed_kept / 8 then redis.call('LTRIM', feed_key, -feed_kept, -1) end
    if place == fed then place = fed + #added end  -- all read: not its own again
    fed = fed + #added
    redis.call('HSET', counters_key, 'seq', string.format('%.0f', seq),
               'fed', string.format('%.0f', fed))
  elseif R > 0 then
    redis.call('HSET', counters_key, 'seq', string.format('%.0f', seq))
  end
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
  local ended = acked + bad + untracked + dropped
  if ended > 0 then count(counters_key, 'leased', -ended) end
  if acked + revisited + untracked > 0 then
    count(counters_key, 'acked', acked + revisited + untracked)
  end
  if bad > 0 then count(counters_key, 'bad', bad) end
  if revisited > 0 then count(counters_key, 'waiting', revisited) end
  -- a page kept for the first time was visited once, not revisited
  if revisited > tracked then count(counters_key, 'revisits', revisited - tracked) end
  if tracked - untracked ~= 0 then count(counters_key, 'tracked', tracked - untracked) end
  if changes > 0 then count(counters_key, 'changes', changes) end
  if not feeding then place = -1 end
  return {queued + waiting, dups, acked, dup_idx, seen_new_layers(), epoch, known, revisited,
          untracked, place, feed_out}
end
