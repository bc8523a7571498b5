-- lease_paced: the second half of a lease on a Redis Cluster (pace.lua is the first):
-- take the offered sites' requests, as many as their reserved slots, each leased until
-- a deadline on this slot's Redis clock, in the order and round robin of _pop.lua.
-- uses: pop, counters, entry, batch, clock
--
-- KEYS[1] sites  KEYS[2] req  KEYS[3] leases  KEYS[4] owner  KEYS[5] counters
-- KEYS[6] waiting  KEYS[7] credit (as lease.lua's)
-- KEYS[8 ..] three keys per offered site, in the order of the offer: its queue, its
-- FIFO list and its revisit list
--
-- ARGV[1] node id     ARGV[2] lease length (ms)     ARGV[3] H, sites to return as the
-- next offer
-- ARGV[4] the revisit share (as lease.lua's ARGV[12])
-- ARGV[5 ..] per offered site, quintuples: site, take (its reserved slots), first slot
--            (µs after the pace's now; -1: any time), interval (µs), late (µs)
-- Returns {{rid, entry, slot, late, ...} (slot in µs after the pace's now; -1: any
-- time), {requests taken per offered site}, {next offer}, requests still queued,
-- requests leased (all nodes; waiting ones included), the job's control command
-- sequence, the job's epoch ("": none yet; see _commit.lua)}

local sites_key, req_key, leases_key, owner_key, counters_key, waiting_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local credit_key = KEYS[7]
local node, hint_n = ARGV[1], tonumber(ARGV[3])
local deadline = string.format('%.0f', now_ms() + tonumber(ARGV[2]))
pop_init(credit_key, tonumber(ARGV[4]), (#ARGV - 4) / 5)
local out, taken, got = {}, {}, 0
for i = 5, #ARGV - 4, 5 do
  local site, take, first = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local interval, late = tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
  local k = 8 + 3 * (i - 5) / 5
  local n = 0
  if take > 0 and redis.call('ZSCORE', sites_key, site) then
    pop_site(sites_key, req_key, counters_key, site, KEYS[k], KEYS[k + 1], KEYS[k + 2],
             take, function(rid, entry)
      local slot = first >= 0 and first + n * interval or -1
      if pop_lease(node, deadline, out, rid, entry, slot, first >= 0 and late or 0) then
        n = n + 1
      end
    end)
  end
  got = got + n
  taken[#taken + 1] = n
end
pop_flush(req_key, leases_key, owner_key, counters_key)
if got > 0 then
  count(counters_key, 'leased', got)
  count(counters_key, 'leased_total', got)
end
local leased = redis.call('ZCARD', leases_key) + redis.call('ZCARD', waiting_key)
return {out, taken, redis.call('ZRANGE', sites_key, 0, hint_n - 1), counter(counters_key, 'queued'),
        leased, counter(counters_key, 'control_seq'),
        redis.call('HGET', counters_key, 'epoch') or ''}
