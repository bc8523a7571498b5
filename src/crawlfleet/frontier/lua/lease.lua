-- lease: hand up to N queued requests to a node, fairly across the sites offered,
-- each leased until a deadline on the Redis clock; a request of a rate-limited site
-- comes with its send time (slot), on the budget's schedule.
-- uses: backoff, counters, entry
--
-- KEYS[1] sites     zset  site -> serve order (0 for a new site; the job's serve counter
--                         when last served)
-- KEYS[2] req       hash  rid -> "<score>\0<site>\0<payload>" (see _entry.lua)
-- KEYS[3] leases    zset  rid -> lease deadline (ms)
-- KEYS[4] owner     hash  rid -> node id
-- KEYS[5] counters  hash
-- KEYS[6] pace      hash  budget -> its last slot granted (µs, Redis clock; kept for
--                         sites with an interval). A budget is a site, or a site within
--                         a scope (node IP, crawler type): limits.py
-- KEYS[7] throttle  hash  "b:<site>" -> "<interval ms>:<set at ms>": the site's adaptive
--                         back-off (throttle.lua), halving every half-life;
--                         "r:<site>" -> "<its robots.txt Crawl-delay (ms; 0: none)>:<when
--                         it became known (ms)>" (absent: robots.txt not read yet; the
--                         first slot comes one interval after it, as the probe request
--                         went out then); "p:<site>" -> end of the current robots probe
--                         (ms)
-- KEYS[8 ..]        two keys per offered site, in the order of the offer: its queue
--                   (zset) and its FIFO list of priority-0 requests (commit.lua)
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
-- ARGV[11 ..] the offer: quadruples of site name, its configured interval (µs) between
--            requests (0: no rate limit), its budget (pace field) and how late (µs)
--            a request may be sent after its configured slot
--
-- A site's interval is the largest of its configured one, its robots.txt Crawl-delay
-- and its current back-off; while a delay or back-off widens it, a job's own budget
-- ("...|job=<job>") is paced in the budget every job shares (the name without it).
-- Its slots follow one another by that interval on the budget's schedule (the last
-- slot granted, in the pace hash), starting now at the earliest, so a changed
-- interval applies to the very next slot; a site whose next slot lies beyond the
-- horizon is not ready. A slot that is not used (a node died or gave the request
-- back) is lost to the budget, never given twice.
-- A site's requests come in priority order, then first in first out: priorities above
-- 0 from its queue, then its FIFO list, then priorities below 0. A leased request
-- always has its req entry (a FIFO item gets one here).
-- A served site moves behind every other site (round robin: one big site cannot starve
-- the rest). A site with nothing queued spends no budget. An emptied site leaves the
-- sites zset (its queue keys are gone with their last members).
-- Returns {now (µs), {rid, entry, slot, late, ...}, {next offer: the H sites least
-- recently served}, requests still queued, requests leased (all nodes),
-- µs until the first site skipped here is ready (-1: none skipped), the job's control
-- command sequence (a node seeing it change reads its commands at once), {sites whose
-- back-off ended (decayed) in this call}}
-- where slot is the request's send time in µs after now (-1: any time) and late how
-- many µs after its slot it may still be sent.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now / 1000)
local node, lease_ms = ARGV[1], tonumber(ARGV[2])
local want, per_site, hint_n = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local half_life, probe_ms = tonumber(ARGV[6]), tonumber(ARGV[7])
local horizon, late_share = tonumber(ARGV[8]), tonumber(ARGV[9])
local ADAPTIVE_LATE_MIN_US = 50000
local max_slots = tonumber(ARGV[10])
local deadline = now_ms + lease_ms
local out, got = {}, 0
local ready_in = -1

-- a time as digits: Redis may write a large Lua number in exponent form
local function digits(x) return string.format('%.0f', x) end

local function not_ready(wait)
  if ready_in < 0 or wait < ready_in then ready_in = wait end
end

-- the site's back-off now (ms): its interval halves every half-life since it was set;
-- a back-off that has decayed below 10 ms is over and is removed
local ended = {}
local function backoff(site)
  local raw = redis.call('HGET', KEYS[7], 'b:' .. site)
  if not raw then return 0 end
  local left = backoff_left(raw, now_ms, half_life)
  if left < 10 then
    redis.call('HDEL', KEYS[7], 'b:' .. site)
    ended[#ended + 1] = site
    return 0
  end
  return math.floor(left)
end

for i = 11, #ARGV - 3, 4 do
  if got >= want then break end
  local site, configured, budget = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local late = tonumber(ARGV[i + 3])
  local qkey = KEYS[8 + (i - 11) / 2]
  local fifo = KEYS[9 + (i - 11) / 2]
  local robots = redis.call('HGET', KEYS[7], 'r:' .. site)
  local probing = probe_ms > 0 and not robots
  local delay_ms, known_ms = string.match(robots or '0', '^(%d+):?(%d*)')
  local interval = math.max(configured, tonumber(delay_ms or '0') * 1000, backoff(site) * 1000)
  if interval > configured then
    -- a robots.txt delay or a back-off is the site's, for every job: a job's own
    -- budget gives way to the one every job shares while it lasts
    budget = string.gsub(budget, '|job=.*$', '')
    late = math.max(late, math.floor(interval * late_share),
                    math.min(ADAPTIVE_LATE_MIN_US, math.floor(interval / 2)))
  end
  local take = math.min(per_site, want - got)
  local first = now  -- the first slot
  if probing then
    local probe_end = tonumber(redis.call('HGET', KEYS[7], 'p:' .. site) or '0')
    if probe_end > now_ms then
      not_ready((probe_end - now_ms) * 1000)
      take = 0
    else
      take = 1
    end
  elseif interval > 0 then
    local last = redis.call('HGET', KEYS[6], budget)
    if last then first = math.max(now, tonumber(last) + interval) end
    if known_ms and known_ms ~= '' then
      first = math.max(first, tonumber(known_ms) * 1000 + interval)
    end
    if first > now + horizon then
      not_ready(first - now - horizon)
      take = 0
    else
      take = math.min(take, max_slots, math.floor((now + horizon - first) / interval) + 1)
    end
  end
  if take > 0 and redis.call('ZSCORE', KEYS[1], site) then
    local popped_n, n = 0, 0
    local function lease_one(rid, entry)
      if not entry then return end  -- gone (a hand edit): nothing to lease
      redis.call('ZADD', KEYS[3], deadline, rid)
      redis.call('HSET', KEYS[4], rid, node)
      out[#out + 1] = rid
      out[#out + 1] = entry
      if interval > 0 and not probing then
        out[#out + 1] = first + n * interval - now
        out[#out + 1] = late
      else
        out[#out + 1] = -1
        out[#out + 1] = 0
      end
      n = n + 1
      got = got + 1
    end
    -- priorities above 0 first (and priority-0 entries queued before FIFO lists
    -- existed: older than any list item), then the FIFO list, then those below 0
    local high = redis.call('ZRANGEBYSCORE', qkey, '-inf', '(' .. SEQ_SPAN, 'LIMIT', 0, take)
    if #high > 0 then redis.call('ZREM', qkey, unpack(high)) end
    for _, rid in ipairs(high) do lease_one(rid, redis.call('HGET', KEYS[2], rid)) end
    popped_n = #high
    if popped_n < take then
      local items = redis.call('LPOP', fifo, take - popped_n)
      for _, item in ipairs(items or {}) do
        local sep = string.find(item, '\0', 1, true)
        local seq = sep and tonumber(string.sub(item, 1, sep - 1))
        local rid, entry
        if seq then
          rid = string.sub(item, 1, sep - 1)
          entry = string.format('%.17g', seq % SEQ_SPAN) .. '\0' .. site .. '\0'
                  .. string.sub(item, sep + 1)
        else
          -- malformed: leased under a new id as it is; the node sets it aside
          rid = 'bad' .. count(KEYS[5], 'bad_seq', 1)
          entry = item
        end
        redis.call('HSET', KEYS[2], rid, entry)
        lease_one(rid, entry)
      end
      popped_n = popped_n + #(items or {})
    end
    if popped_n < take then
      local low = redis.call('ZPOPMIN', qkey, take - popped_n)
      for j = 1, #low, 2 do lease_one(low[j], redis.call('HGET', KEYS[2], low[j])) end
      popped_n = popped_n + #low / 2
    end
    if redis.call('EXISTS', qkey, fifo) == 0 then
      redis.call('ZREM', KEYS[1], site)
    else
      redis.call('ZADD', KEYS[1], 'XX', count(KEYS[5], 'served', 1), site)
    end
    if popped_n > 0 then
      count(KEYS[5], 'queued', -popped_n)
    end
    if n > 0 and interval > 0 and not probing then
      redis.call('HSET', KEYS[6], budget, digits(first + (n - 1) * interval))
    end
    if n > 0 and probing then
      redis.call('HSET', KEYS[7], 'p:' .. site, digits(now_ms + probe_ms))
    end
  end
end
if got > 0 then
  count(KEYS[5], 'leased', got)
  count(KEYS[5], 'leased_total', got)
end
local hint = redis.call('ZRANGE', KEYS[1], 0, hint_n - 1)
local queued = counter(KEYS[5], 'queued')
local control_seq = counter(KEYS[5], 'control_seq')
return {now, out, hint, queued, redis.call('ZCARD', KEYS[3]), ready_in, control_seq, ended}
