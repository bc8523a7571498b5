-- requeue: return leased requests to their site queues, at their original place
-- (same score: priority, then FIFO; a priority-0 request goes back to the head of its
-- site's FIFO list, those returned together in sequence order, and leaves the req
-- hash; a retry whose wait is over joins the back of its priority, after what is
-- queued). A revisit (its entry marked, see _entry.lua) goes to its site's revisit
-- list instead, whatever its priority: when its time has come at the back (the
-- reclaim lists them by due time: the list is in due order), a lease returned at the
-- head (it was due before any queued one), those returned together in sequence
-- order; a priority-0 one lean ("<rid>\0<payload>", no req entry), another as "<rid>"
-- (its entry kept). Used for expired leases, the leases of dead nodes (any node) and
-- waiting requests whose time has come, and by a node that gives back what it holds
-- when it stops.
-- uses: entry, counters, clock
--
-- KEYS[1] sites     zset  site -> serve order (see lease.lua)
-- KEYS[2] req       hash  rid -> "<score>\0<site>\0<payload>" (see _entry.lua)
-- KEYS[3] leases    zset  rid -> lease deadline (ms)
-- KEYS[4] owner     hash  rid -> node id
-- KEYS[5] counters  hash
-- KEYS[6] waiting   zset  rid -> due time (ms) of the requests waiting for their time
--                   (see commit.lua)
-- KEYS[7] nodes     zset  node id -> time (ms) after which it counts as dead
-- KEYS[8] bad       list  malformed entries, set aside for inspection
-- KEYS[9 ..]        three keys per site: its queue (zset), its FIFO list and its
--                   revisit list
--
-- ARGV[1] mode: "expired" (only leases past their deadline, or held by a node that
--         counts as dead) or "owner" (only leases held by ARGV[2])
-- ARGV[2] node id (mode "owner")
-- ARGV[3] the holder of waiting requests of the former form (records.WAITING: a lease
--         of that holder, from before the waiting set): one of its requests, as one of
--         the waiting set, is queued only once its time has come, in either mode
--         (counter "waiting")
-- ARGV[4 ..] pairs: rid, site index (1-based: its keys are KEYS[6 + 3i] to KEYS[8 + 3i];
--            0 = request gone or malformed)
-- Returns {requests returned to a queue, of which waiting ones whose time had come,
--          {rid, what is wrong, ...} of the entries set aside}
-- (counter "revisits_queued": the revisits now in revisit lists)
-- (a waiting entry found malformed is set aside: it leaves "waiting", is not counted).
-- A malformed entry is moved to the bad list (counter "bad"), never requeued; the
-- caller logs each one. A waiting request leaves "leased" as a lease does (it counts
-- there while it waits).

local sites_key, req_key, leases_key, owner_key, counters_key, waiting_key, nodes_key,
      bad_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local now = now_ms()
local mode, node, waiting_holder = ARGV[1], ARGV[2], ARGV[3]
local back, dropped, left_waiting, came_due = 0, 0, 0, 0
local set_aside = {}
local fronts = {}  -- site index -> {{seq, FIFO item}, ...}
local revisit_fronts = {}  -- site index -> {{seq, revisit list item}, ...}
local revisits = 0
for i = 4, #ARGV, 2 do
  local rid, qi = ARGV[i], tonumber(ARGV[i + 1])
  local due = redis.call('ZSCORE', waiting_key, rid)
  local ok, was_waiting = false, false
  if due then
    ok = tonumber(due) < now
    was_waiting = ok
    if ok then redis.call('ZREM', waiting_key, rid) end
  else
    local deadline = redis.call('ZSCORE', leases_key, rid)
    if deadline then
      local holder = redis.call('HGET', owner_key, rid)
      if holder == waiting_holder then
        ok = tonumber(deadline) < now
        was_waiting = ok
      elseif mode == 'expired' then
        ok = tonumber(deadline) < now
        if not ok then
          local alive_until = holder and redis.call('ZSCORE', nodes_key, holder)
          ok = not alive_until or tonumber(alive_until) < now
        end
      else
        ok = holder == node
      end
    end
    if ok then
      redis.call('ZREM', leases_key, rid)
      redis.call('HDEL', owner_key, rid)
    end
  end
  if ok then
    local entry = redis.call('HGET', req_key, rid)
    local score, site, payload = entry_parts(entry)
    if was_waiting then left_waiting = left_waiting + 1 end
    if score and qi > 0 then
      local seq = tonumber(rid)
      local lean = fifo_score(score) and seq and seq % SEQ_SPAN == score
      if entry_revisit(entry) then
        local item = rid
        if lean then
          item = rid .. '\0' .. payload
          redis.call('HDEL', req_key, rid)
        end
        if was_waiting then
          redis.call('RPUSH', KEYS[8 + 3 * qi], item)
        else
          revisit_fronts[qi] = revisit_fronts[qi] or {}
          table.insert(revisit_fronts[qi], {seq or 0, item})
        end
        revisits = revisits + 1
      elseif was_waiting and lean then
        -- a retry whose time has come: queued after what is queued now
        redis.call('RPUSH', KEYS[7 + 3 * qi], rid .. '\0' .. payload)
        redis.call('HDEL', req_key, rid)
      elseif lean then
        fronts[qi] = fronts[qi] or {}
        table.insert(fronts[qi], {seq, rid .. '\0' .. payload})
        redis.call('HDEL', req_key, rid)
      else
        if was_waiting then
          -- a retry whose wait is over: at the back of its priority, as a new request
          local prio_part = math.floor(score / SEQ_SPAN) * SEQ_SPAN
          score = prio_part + (count(counters_key, 'seq', 1) % SEQ_SPAN)
          redis.call('HSET', req_key, rid,
                     string.format('%.17g', score) .. '\0' .. site .. '\0' .. payload)
        end
        redis.call('ZADD', KEYS[6 + 3 * qi], score, rid)
      end
      redis.call('ZADD', sites_key, 'NX', 0, site)
      back = back + 1
      if was_waiting then came_due = came_due + 1 end
    else
      if not entry then
        note_gone(req_key, rid)
      else
        redis.call('RPUSH', bad_key, entry)
        count(counters_key, 'bad', 1)
        set_aside[#set_aside + 1] = rid
        set_aside[#set_aside + 1] = entry_fault(entry)
          or 'its site was not given (it was listed while malformed)'
      end
      redis.call('HDEL', req_key, rid)
      dropped = dropped + 1
    end
  end
end
for qi, items in pairs(fronts) do fifo_push_front(KEYS[7 + 3 * qi], items) end
for qi, items in pairs(revisit_fronts) do fifo_push_front(KEYS[8 + 3 * qi], items) end
if revisits > 0 then count(counters_key, 'revisits_queued', revisits) end
if back + dropped > 0 then count(counters_key, 'leased', -(back + dropped)) end
if left_waiting > 0 then count(counters_key, 'waiting', -left_waiting) end
if back > 0 then
  count(counters_key, 'queued', back)
  if back > came_due then count(counters_key, 'requeued', back - came_due) end
end
return {back, came_due, set_aside}
