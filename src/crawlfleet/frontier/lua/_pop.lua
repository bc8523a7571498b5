-- Library (prepended to scripts whose header says "-- uses: pop"; needs entry,
-- counters and batch): taking a site's queued requests for a lease. A site has two
-- queues: its new URLs and its revisits (tracked pages whose next visit came, first due
-- first: see requeue.lua).
-- New URLs come in priority order, then first in first out: priorities above 0 from
-- its queue (and priority-0 entries queued before FIFO lists existed: older than any
-- list item), then its FIFO list, then priorities below 0.
-- The share: when both queues have requests, each request taken is a revisit when the
-- site's credit plus the revisit share reaches 1 (the credit then loses 1), else a new
-- URL; the credit is kept (the job's credit hash, site -> credit) while both queues have
-- requests and dropped when one is empty, so a share nobody uses goes to the other
-- queue and is not saved up. Only one queue with requests: it gives all. Share 0.5
-- alternates, 0.25 takes one revisit in four, 0 none while new URLs wait, 1 no new URL
-- while revisits wait. A site without revisits costs one LLEN more than one queue did.
-- A leased request always has its req entry (a list item gets one here; a revisit's
-- is marked, see _entry.lua). A served site moves behind every other site (round
-- robin); a site with both queues empty leaves the sites zset.

-- the job's credit hash and the revisit share (a number from 0 to 1), set by pop_init;
-- the serve orders this call reserved (order: the last one given, last: the last
-- reserved; nil: none yet), how many to reserve at once (the sites offered), and the
-- requests taken off the queues so far (counted by pop_flush)
local POP = {credit = '', share = 0.5, order = nil, last = 0, reserve = 1, taken = 0}

-- the writes of this call's leases, made by pop_flush in one variadic call a key (a
-- call a request and key cost Redis more than the requests themselves; _batch.lua):
-- req entries of list items {rid, entry, ...}, leases {deadline, rid, ...}, owners
-- {rid, node, ...}. (A script error between a pop and pop_flush would lose the list
-- items popped so far; nothing there raises on any input: the counters and back-off
-- readers are defensive.)
local LEASED = {req = {}, leases = {}, owner = {}}

-- a lease of *sites* offered sites begins (see POP)
local function pop_init(credit_key, share, sites)
  POP.credit = credit_key
  POP.share = share
  POP.order, POP.last, POP.reserve, POP.taken = nil, 0, math.max(1, sites), 0
end

-- the next serve order: the job's counter "served" is raised once for all the sites a
-- lease may serve, not once a site (an order reserved and not used is a gap, harmless)
local function next_order(counters)
  if not POP.order or POP.order >= POP.last then
    POP.last = count(counters, 'served', POP.reserve)
    POP.order = POP.last - POP.reserve
  end
  POP.order = POP.order + 1
  return POP.order
end

-- the req entry of queued request *rid* (nil, noted in GONE: it is gone)
local function entry_of(req, rid)
  local entry = redis.call('HGET', req, rid)
  if not entry then note_gone(req, rid) end
  return entry
end

-- {rid, entry} of list item *item* ("<rid>\0<payload>", its entry written to *req*,
-- marked a revisit's with *mark*); a malformed one is leased under a new id as it is
-- (the node sets it aside)
local function from_item(req, counters, site, item, mark)
  local sep = string.find(item, '\0', 1, true)
  local seq = sep and tonumber(string.sub(item, 1, sep - 1))
  local rid, entry
  if seq then
    rid = string.sub(item, 1, sep - 1)
    -- the score is the rid's own digits below SEQ_SPAN (no number formatted)
    local score = seq < SEQ_SPAN and rid or string.format('%.17g', seq % SEQ_SPAN)
    entry = score .. mark .. '\0' .. site .. '\0' .. string.sub(item, sep + 1)
  else
    rid = 'bad' .. count(counters, 'bad_seq', 1)
    entry = item
  end
  local w = LEASED.req
  w[#w + 1] = rid
  w[#w + 1] = entry
  return {rid, entry}
end

-- take up to *n* new URLs of *site* (queue zset *qkey*, FIFO list *fifo*), in order,
-- appending {rid, entry} to *got* (entry nil: its request is gone)
local function pop_new(req, counters, site, qkey, fifo, n, got)
  local high = redis.call('ZRANGEBYSCORE', qkey, '-inf', '(' .. SEQ_SPAN, 'LIMIT', 0, n)
  for _, rid in ipairs(high) do redis.call('ZREM', qkey, rid) end
  for _, rid in ipairs(high) do got[#got + 1] = {rid, entry_of(req, rid)} end
  if #got < n then
    for _, item in ipairs(redis.call('LPOP', fifo, n - #got) or {}) do
      got[#got + 1] = from_item(req, counters, site, item, '')
    end
  end
  if #got < n then
    local low = redis.call('ZPOPMIN', qkey, n - #got)
    for j = 1, #low, 2 do got[#got + 1] = {low[j], entry_of(req, low[j])} end
  end
end

-- take up to *n* revisits of *site* from its revisit list *rkey*, appending {rid,
-- entry} to *got*: an item "<rid>\0<payload>" is lean (priority 0), an item "<rid>"
-- (no separator) a revisit at another priority whose entry stayed in *req*
local function pop_revisits(req, counters, site, rkey, n, got)
  for _, item in ipairs(redis.call('LPOP', rkey, n) or {}) do
    if string.find(item, '\0', 1, true) then
      got[#got + 1] = from_item(req, counters, site, item, REVISIT_MARK)
    else
      got[#got + 1] = {item, entry_of(req, item)}
    end
  end
end

-- of *take* requests, with *revisits* and *news* queued: {true (a revisit) or false,
-- ...} in the order to take them, by the share rule (the header)
local function share_out(site, take, revisits, news)
  local credit = tonumber(redis.call('HGET', POP.credit, site) or '0') or 0
  local kinds, r, n = {}, 0, 0
  while r + n < take and (r < revisits or n < news) do
    local revisit
    if r < revisits and n < news then
      credit = credit + POP.share
      revisit = credit >= 1 - 1e-9
      if revisit then credit = credit - 1 end
    else
      revisit = r < revisits
    end
    kinds[#kinds + 1] = revisit
    if revisit then r = r + 1 else n = n + 1 end
  end
  if r < revisits and n < news then
    redis.call('HSET', POP.credit, site, string.format('%.17g', credit))
  else
    redis.call('HDEL', POP.credit, site)
  end
  return kinds, r, n
end

-- take up to *take* requests of *site* (its queue zset *qkey*, its FIFO list *fifo*,
-- its revisit list *rkey*), calling leased(rid, entry) for each in order (entry nil:
-- its request is gone); returns how many were taken off the queues
local function pop_site(sites, req, counters, site, qkey, fifo, rkey, take, leased)
  local got = {}
  local revisits = redis.call('LLEN', rkey)
  if revisits == 0 then
    pop_new(req, counters, site, qkey, fifo, take, got)
  else
    local news = redis.call('ZCARD', qkey) + redis.call('LLEN', fifo)
    local kinds, r, n = share_out(site, take, revisits, news)
    local revs, new = {}, {}
    pop_revisits(req, counters, site, rkey, r, revs)
    pop_new(req, counters, site, qkey, fifo, n, new)
    local a, b = 1, 1
    for _, revisit in ipairs(kinds) do
      if revisit then
        got[#got + 1] = revs[a]
        a = a + 1
      else
        got[#got + 1] = new[b]
        b = b + 1
      end
    end
    if #revs > 0 then count(counters, 'revisits_queued', -#revs) end
  end
  for _, it in ipairs(got) do leased(it[1], it[2]) end
  if redis.call('EXISTS', qkey, fifo, rkey) == 0 then
    redis.call('ZREM', sites, site)
  else
    redis.call('ZADD', sites, 'XX', next_order(counters), site)
  end
  POP.taken = POP.taken + #got
  return #got
end

-- lease a taken request to *node* until *deadline* (ms, as digits: formatted once a
-- call, not once a request): its lease and its owner (written by pop_flush), and
-- {rid, entry, slot, late} appended to *out*; false when its entry is gone (a hand
-- edit: nothing to lease)
local function pop_lease(node, deadline, out, rid, entry, slot, late)
  if not entry then return false end
  local leases, owner = LEASED.leases, LEASED.owner
  leases[#leases + 1] = deadline
  leases[#leases + 1] = rid
  owner[#owner + 1] = rid
  owner[#owner + 1] = node
  out[#out + 1] = rid
  out[#out + 1] = entry
  out[#out + 1] = slot
  out[#out + 1] = late
  return true
end

-- write the leases taken so far (see LEASED) into *req*, *leases* and *owner*, and
-- count the requests taken off the queues in *counters*: before the script reads any
-- of them again, and before it returns
local function pop_flush(req, leases, owner, counters)
  if POP.taken > 0 then
    count(counters, 'queued', -POP.taken)
    POP.taken = 0
  end
  if #LEASED.leases == 0 and #LEASED.req == 0 then return end
  call_batched(LEASED.req, 'HSET', req)
  call_batched(LEASED.leases, 'ZADD', leases)
  call_batched(LEASED.owner, 'HSET', owner)
  LEASED = {req = {}, leases = {}, owner = {}}
end
