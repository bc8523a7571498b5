-- Library (prepended to scripts whose header says "-- uses: lease"; needs pace, pop,
-- backoff, counters, entry and clock): lease_run(KEYS, ARGV), the body of a lease, for
-- lease.lua and commit_lease.lua (a node's round in one call). Its KEYS and ARGV are
-- the tables it is given, as follows.
--
-- lease: hand up to N queued requests to a node, fairly across the sites offered,
-- each leased until a deadline on the Redis clock; a request of a rate-limited site
-- comes with its send time (slot), on the budget's schedule.
--
-- KEYS[1] sites           zset  site -> serve order (0 for a new site; the job's serve
--                               counter when last served)
-- KEYS[2] req             hash  rid -> "<score>\0<site>\0<payload>" (see _entry.lua)
-- KEYS[3] leases          zset  rid -> lease deadline (ms)
-- KEYS[4] owner           hash  rid -> node id
-- KEYS[5] counters        hash
-- KEYS[6] waiting         zset  rid -> due time (ms) of the requests waiting for their
--                               time (see commit.lua): counted in "requests leased"
-- KEYS[7] fleet_pace      hash  (the fleet's, every job's) budget -> its last slot
--                               granted (µs, Redis clock; kept for sites with an
--                               interval). A budget is a site, or a site within a scope
--                               (node IP, crawler type): limits.py
-- KEYS[8] fleet_throttle  hash  (the fleet's) "b:<site>" -> "<interval ms>:<set at
--                               ms>": the site's adaptive back-off (throttle.lua),
--                               halving every half-life; "r:<site>" -> "<its robots.txt
--                               Crawl-delay (ms; 0: none)>:<when it became known (ms)>"
--                               (absent: robots.txt not read yet; the first slot comes
--                               one interval after it, as the probe request went out
--                               then); "p:<site>" -> end of the current robots probe (ms)
-- KEYS[9] credit          hash  site -> its revisit credit (see _pop.lua)
-- KEYS[10 ..]       three keys per offered site, in the order of the offer: its queue
--                   (zset), its FIFO list of priority-0 requests (commit.lua) and its
--                   revisit list (requeue.lua)
--
-- ARGV[1] node id       ARGV[2] lease length (ms)     ARGV[3] N, most requests in all
-- ARGV[4] most requests per site       ARGV[5] H, sites to return as the next offer
-- ARGV[6] back-off half-life (ms)
-- ARGV[7] robots probe (ms): when > 0 (the node obeys robots.txt), a site whose
--         robots.txt no node has read yet gives one request per this long (the node
--         that gets it reads robots.txt first and reports it; see throttle.lua)
-- ARGV[8] horizon (µs): slots are granted at most this far ahead of now
-- ARGV[9] late share: a slot spaced by a robots.txt delay or a back-off may be sent up
--         to this share of its interval late, and at least ADAPTIVE_LATE_MIN_US late
--         (at most half its interval)
--         (else a round trip to Redis longer than that share would make every such
--         slot too late on arrival: given back and leased again until the back-off
--         decays)
-- ARGV[10] most slots granted per rate-limited site (the node's free download
--          capacity: a node never takes more slots than it can send on time)
-- ARGV[11] lead (µs): a rate-limited site's first slot comes no sooner than this after
--          now (the node needs that long to receive and place it: the reply's way back
--          and its event loop's lag; a slot that reached it late would be given back)
-- ARGV[12] the revisit share, from 0 to 1: when a site has both revisits and new URLs
--          queued, the share of its requests taken from its revisits (_pop.lua)
-- ARGV[13 ..] the offer: quadruples of site name, its configured interval (µs) between
--            requests (0: no rate limit), its budget (pace field) and how late (µs)
--            a request may be sent after its configured slot
--
-- Pacing (interval, budget, slots, robots probes): _pace.lua; the order requests are
-- taken in and round robin over sites: _pop.lua. A slot that is not used (a node died
-- or gave the request back) is lost to the budget, never given twice. A site with
-- nothing queued spends no budget.
-- Returns {now (µs), {rid, entry, slot, late, ...}, {next offer: the H sites least
-- recently served}, requests still queued, requests leased (all nodes; waiting ones
-- included),
-- µs until the first site skipped here is ready (-1: none skipped), the job's control
-- command sequence (a node seeing it change reads its commands at once), {sites whose
-- back-off ended (decayed) in this call}, the job's epoch ("": none yet; see
-- _commit.lua: a node whose seen cache is of another epoch forgets it before it takes
-- these requests)}
-- where slot is the request's send time in µs after now (-1: any time) and late how
-- many µs after its slot it may still be sent.

local function lease_run(KEYS, ARGV)
  local sites_key, req_key, leases_key, owner_key, counters_key, waiting_key =
    KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
  local fleet_pace_key, fleet_throttle_key = KEYS[7], KEYS[8]
  local credit_key = KEYS[9]
  local now = now_us()
  local node, lease_ms = ARGV[1], tonumber(ARGV[2])
  local want, per_site, hint_n = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  pace_init(fleet_pace_key, fleet_throttle_key, now, tonumber(ARGV[6]), tonumber(ARGV[7]),
            tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]))
  pop_init(credit_key, tonumber(ARGV[12]), (#ARGV - 12) / 4)
  local deadline = digits(math.floor(now / 1000) + lease_ms)  -- once a call (_pace.lua)
  local out, got = {}, 0

  for i = 13, #ARGV - 3, 4 do
    if got >= want then break end
    local site = ARGV[i]
    local take, first, interval, late, probing, budget =
      pace_site(site, tonumber(ARGV[i + 1]), ARGV[i + 2], tonumber(ARGV[i + 3]),
                math.min(per_site, want - got))
    if take > 0 and redis.call('ZSCORE', sites_key, site) then
      local n = 0
      local k = 10 + 3 * (i - 13) / 4
      pop_site(sites_key, req_key, counters_key, site, KEYS[k], KEYS[k + 1], KEYS[k + 2], take,
               function(rid, entry)
        local slot = pace_slot(first, interval, probing, n)
        if pop_lease(node, deadline, out, rid, entry, slot, slot >= 0 and late or 0) then
          n = n + 1
        end
      end)
      got = got + n
      if n > 0 then pace_use(site, budget, first, interval, probing, n) end
    end
  end
  pop_flush(req_key, leases_key, owner_key, counters_key)
  if got > 0 then
    count(counters_key, 'leased', got)
    count(counters_key, 'leased_total', got)
  end
  local hint = redis.call('ZRANGE', sites_key, 0, hint_n - 1)
  local queued = counter(counters_key, 'queued')
  local control_seq = counter(counters_key, 'control_seq')
  local leased = redis.call('ZCARD', leases_key) + redis.call('ZCARD', waiting_key)
  local epoch = redis.call('HGET', counters_key, 'epoch') or ''
  return {now, out, hint, queued, leased, PACE.ready_in, control_seq, PACE.ended, epoch}
end
