-- lease: hand up to N queued requests to a node, fairly across the sites offered,
-- each leased until a deadline on the Redis clock, within each site's rate limit.
--
-- KEYS[1] sites     zset  site -> serve order (0 for a new site; the job's serve counter
--                         when last served)
-- KEYS[2] req       hash  rid -> "<score>\0<site>\0<payload>"
-- KEYS[3] leases    zset  rid -> lease deadline (ms)
-- KEYS[4] owner     hash  rid -> node id
-- KEYS[5] counters  hash
-- KEYS[6] pace      hash  site -> time (ms, Redis clock) before which the site gets no
--                         new request (its rate limit; absent: ready)
-- KEYS[7 ..]        the queues of the offered sites, in the order of the offer
--
-- ARGV[1] node id       ARGV[2] lease length (ms)     ARGV[3] N, most requests in all
-- ARGV[4] most requests per site       ARGV[5] H, sites to return as the next offer
-- ARGV[6 ..] the offer: pairs of site name and its interval (ms) between requests,
--            0 for a site without a rate limit
--
-- A served site moves behind every other site (round robin: one big site cannot starve
-- the rest). A rate-limited site gives at most one request per call, and only when its
-- pace time has come; its next pace time is then now + interval. A site with nothing
-- queued spends no budget. An emptied site leaves the sites zset (its queue key is gone
-- with its last member).
-- Returns {now_ms, {rid, entry, rid, entry, ...}, {next offer: the H sites least
-- recently served}, requests still queued, requests leased (all nodes),
-- ms until the first rate-limited site skipped here is ready (-1: none skipped)}

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local node, lease_ms = ARGV[1], tonumber(ARGV[2])
local want, per_site, hint_n = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local deadline = now + lease_ms
local out, got = {}, 0
local ready_in = -1

for i = 6, #ARGV - 1, 2 do
  if got >= want then break end
  local site, interval = ARGV[i], tonumber(ARGV[i + 1])
  local qkey = KEYS[7 + (i - 6) / 2]
  local pace = 0
  if interval > 0 then
    pace = tonumber(redis.call('HGET', KEYS[6], site) or '0')
  end
  if pace > now then
    if ready_in < 0 or pace - now < ready_in then ready_in = pace - now end
  elseif redis.call('ZSCORE', KEYS[1], site) then
    local take = math.min(per_site, want - got)
    if interval > 0 then take = 1 end
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
      if interval > 0 then redis.call('HSET', KEYS[6], site, now + interval) end
    end
  end
end
if got > 0 then
  redis.call('HINCRBY', KEYS[5], 'leased', got)
  redis.call('HINCRBY', KEYS[5], 'leased_total', got)
end
local hint = redis.call('ZRANGE', KEYS[1], 0, hint_n - 1)
local queued = tonumber(redis.call('HGET', KEYS[5], 'queued') or '0')
return {now, out, hint, queued, redis.call('ZCARD', KEYS[3]), ready_in}
