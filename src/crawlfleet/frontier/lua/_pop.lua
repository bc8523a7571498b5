-- Library (prepended to scripts whose header says "-- uses: pop"; needs entry and
-- counters): taking a site's queued requests for a lease. A site's requests come in
-- priority order, then first in first out: priorities above 0 from its queue (and
-- priority-0 entries queued before FIFO lists existed: older than any list item), then
-- its FIFO list, then priorities below 0. A leased request always has its req entry (a
-- FIFO item gets one here). A served site moves behind every other site (round robin);
-- an emptied site leaves the sites zset.

-- the req entry of queued request *rid* (nil, noted in GONE: it is gone)
local function entry_of(req, rid)
  local entry = redis.call('HGET', req, rid)
  if not entry then note_gone(req, rid) end
  return entry
end

-- take up to *take* requests of *site* (its queue zset *qkey*, its FIFO list *fifo*),
-- calling leased(rid, entry) for each in order (entry nil: its request is gone);
-- returns how many were taken off the queues
local function pop_site(sites, req, counters, site, qkey, fifo, take, leased)
  local popped = 0
  local high = redis.call('ZRANGEBYSCORE', qkey, '-inf', '(' .. SEQ_SPAN, 'LIMIT', 0, take)
  for _, rid in ipairs(high) do redis.call('ZREM', qkey, rid) end
  for _, rid in ipairs(high) do leased(rid, entry_of(req, rid)) end
  popped = #high
  if popped < take then
    local items = redis.call('LPOP', fifo, take - popped) or {}
    for _, item in ipairs(items) do
      local sep = string.find(item, '\0', 1, true)
      local seq = sep and tonumber(string.sub(item, 1, sep - 1))
      local rid, entry
      if seq then
        rid = string.sub(item, 1, sep - 1)
        entry = string.format('%.17g', seq % SEQ_SPAN) .. '\0' .. site .. '\0'
                .. string.sub(item, sep + 1)
      else
        -- malformed: leased under a new id as it is; the node sets it aside
        rid = 'bad' .. count(counters, 'bad_seq', 1)
        entry = item
      end
      redis.call('HSET', req, rid, entry)
      leased(rid, entry)
    end
    popped = popped + #items
  end
  if popped < take then
    local low = redis.call('ZPOPMIN', qkey, take - popped)
    for j = 1, #low, 2 do leased(low[j], entry_of(req, low[j])) end
    popped = popped + #low / 2
  end
  if redis.call('EXISTS', qkey, fifo) == 0 then
    redis.call('ZREM', sites, site)
  else
    redis.call('ZADD', sites, 'XX', count(counters, 'served', 1), site)
  end
  if popped > 0 then count(counters, 'queued', -popped) end
  return popped
end

-- lease a taken request to *node* until *deadline* (ms): its lease, its owner, and
-- {rid, entry, slot, late} appended to *out*; false when its entry is gone (a hand
-- edit: nothing to lease)
local function pop_lease(leases, owner, node, deadline, out, rid, entry, slot, late)
  if not entry then return false end
  redis.call('ZADD', leases, deadline, rid)
  redis.call('HSET', owner, rid, node)
  out[#out + 1] = rid
  out[#out + 1] = entry
  out[#out + 1] = slot
  out[#out + 1] = late
  return true
end
