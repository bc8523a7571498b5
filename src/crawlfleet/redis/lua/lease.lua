-- lease: hand up to N queued requests to a node, fairly across the sites offered,
-- each leased until a deadline on the Redis clock, within each site's rate limit.
-- uses: backoff
--
-- KEYS[1] sites     zset  site -> serve order (0 for a new site; the job's serve counter
--                         when last served)
-- KEYS[2] req       hash  rid -> "<score>\0<site>\0<payload>"
-- KEYS[3] leases    zset  rid -> lease deadline (ms)
-- KEYS[4] owner     hash  rid -> node id
-- KEYS[5] counters  hash
-- KEYS[6] pace      hash  budget -> time (ms, Redis clock) of its last request (kept for
--                         sites with an interval or a robots probe). A budget is a site,
--                         or a site within a scope (node IP, crawler type): limits.py
-- KEYS[7] throttle  hash  "b:<site>" -> "<interval ms>:<set at ms>": the site's adaptive
--                         back-off (throttle.lua), halving every half-life;
--                         "r:<site>" -> its robots.txt Crawl-delay (ms; 0: none; absent:
--                         robots.txt not read yet); "p:<site>" -> end of the current
--                         robots probe (ms)
-- KEYS[8 ..]        the queues of the offered sites, in the order of the offer
--
-- ARGV[1] node id       ARGV[2] lease length (ms)     ARGV[3] N, most requests in all
-- ARGV[4] most requests per site       ARGV[5] H, sites to return as the next offer
-- ARGV[6] back-off half-life (ms)
-- ARGV[7] robots probe (ms): when > 0 (the node obeys robots.txt), a site whose
--         robots.txt no node has read yet gives one request per this long (the node
--         that gets it reads robots.txt first and reports it; see throttle.lua)
-- ARGV[8 ..] the offer: triples of site name, its configured interval (ms) between
--            requests (0: no rate limit) and its budget (pace field)
--
-- A site's interval is the largest of its configured one, its robots.txt Crawl-delay
-- and its current back-off.
-- A served site moves behind every other site (round robin: one big site cannot starve
-- the rest). A rate-limited site gives at most one request per call, and only once its
-- interval has passed since its budget's last request (so a changed interval applies
-- to the very next request). A site with nothing
-- queued spends no budget. An emptied site leaves the sites zset (its queue key is gone
-- with its last member).
-- Returns {now_ms, {rid, entry, rid, entry, ...}, {next offer: the H sites least
-- recently served}, requests still queued, requests leased (all nodes),
-- ms until the first rate-limited site skipped here is ready (-1: none skipped),
-- {sites paced in this call: the node reports when it sends their request (sent.lua),
--  so that the next request counts from the real send}}

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local node, lease_ms = ARGV[1], tonumber(ARGV[2])
local want, per_site, hint_n = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local half_life, probe_ms = tonumber(ARGV[6]), tonumber(ARGV[7])
local deadline = now + lease_ms
local out, got = {}, 0
local ready_in = -1
local paced = {}

-- the site's back-off now: its interval halves every half-life since it was set; a
-- back-off that has decayed below 10 ms is over and is removed
local function backoff(site)
  local raw = redis.call('HGET', KEYS[7], 'b:' .. site)
  if not raw then return 0 end
  local left = backoff_left(raw, now, half_life)
  if left < 10 then
    redis.call('HDEL', KEYS[7], 'b:' .. site)
    return 0
  end
  return math.floor(left)
end

for i = 8, #ARGV - 2, 3 do
  if got >= want then break end
  local site, interval, budget = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local qkey = KEYS[8 + (i - 8) / 3]
  local robots = redis.call('HGET', KEYS[7], 'r:' .. site)
  local probing = probe_ms > 0 and not robots
  interval = math.max(interval, tonumber(robots or '0'), backoff(site))
  local pace = 0  -- no request before this time
  if probing then
    pace = tonumber(redis.call('HGET', KEYS[7], 'p:' .. site) or '0')
  elseif interval > 0 then
    local last = redis.call('HGET', KEYS[6], budget)
    if last then pace = tonumber(last) + interval end
  end
  if pace > now then
    if ready_in < 0 or pace - now < ready_in then ready_in = pace - now end
  elseif redis.call('ZSCORE', KEYS[1], site) then
    local take = math.min(per_site, want - got)
    if interval > 0 or probing then take = 1 end
    local popped = redis.call('ZPOPMIN', qkey, take)
    for j = 1, #popped, 2 do
      local rid = popped[j]
      local entry = redis.call('HGET', KEYS[2], rid)
      if entry then
        redis.call('ZADD', KEYS[3], deadline, rid)
        redis.call('HSET', KEYS[4], rid, node)
        out[#out + 1] = rid
        out[#out + 1] = entry
        got = got + 1
      end
    end
    if redis.call('EXISTS', qkey) == 0 then
      redis.call('ZREM', KEYS[1], site)
    else
      redis.call('ZADD', KEYS[1], 'XX', redis.call('HINCRBY', KEYS[5], 'served', 1), site)
    end
    local n = #popped / 2
    if n > 0 then
      redis.call('HINCRBY', KEYS[5], 'queued', -n)
      if interval > 0 or probing then
        redis.call('HSET', KEYS[6], budget, now)
        paced[#paced + 1] = site
      end
      if probing then redis.call('HSET', KEYS[7], 'p:' .. site, now + probe_ms) end
    end
  end
end
if got > 0 then
  redis.call('HINCRBY', KEYS[5], 'leased', got)
  redis.call('HINCRBY', KEYS[5], 'leased_total', got)
end
local hint = redis.call('ZRANGE', KEYS[1], 0, hint_n - 1)
local queued = tonumber(redis.call('HGET', KEYS[5], 'queued') or '0')
return {now, out, hint, queued, redis.call('ZCARD', KEYS[3]), ready_in, paced}
