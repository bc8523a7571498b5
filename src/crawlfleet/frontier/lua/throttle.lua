-- throttle: slow sites down for every node of the job.
-- uses: backoff, clock
--
-- KEYS[1] throttle  hash  "b:<site>" -> "<interval ms>:<set at ms>:<cause>" (back-off;
--                         cause "s": a status, "l": latency alone);
--                         "r:<site>" -> "<robots.txt Crawl-delay ms (0: none)>:<set at ms>";
--                         "p:<site>" -> end of its robots probe (see lease.lua)
-- ARGV[1] kind: "backoff", "recovered" or "robots"
-- backoff: ARGV[2] longest (ms)   ARGV[3] half-life (ms)
--          ARGV[4 ..] quadruples: site, floor (ms; a Retry-After, 0 for none), first
--          back-off (ms; where a site not backed off yet starts), cause ("s" or "l")
--          A site's back-off doubles (from its first back-off), at most once per its
--          current interval however many nodes report it, up to the longest; never
--          below the floor. It decays as lease.lua reads it. Its cause stays "s" once
--          a status was reported.
-- recovered: ARGV[2 ..] sites whose latency is back to normal: a back-off caused by
--          latency alone ends (one caused by a status decays as usual)
-- robots:  ARGV[2 ..] pairs: site, Crawl-delay (ms; 0: robots.txt read, no delay),
--          which also ends the site's robots probe
-- Returns {site, interval ms, ...} as set (back-off: only the sites raised now;
-- recovered: the sites whose back-off ended, with 0).

local throttle_key = KEYS[1]
local now = now_ms()
local out = {}
if ARGV[1] == 'robots' then
  for i = 2, #ARGV - 1, 2 do
    local ms = tonumber(ARGV[i + 1])
    -- when it became known: the site's first slot is one interval after it (the
    -- probe request went out as robots.txt was read, just before this report)
    redis.call('HSET', throttle_key, 'r:' .. ARGV[i], ms .. ':' .. now)
    redis.call('HDEL', throttle_key, 'p:' .. ARGV[i])
    out[#out + 1] = ARGV[i]
    out[#out + 1] = ms
  end
  return out
end
if ARGV[1] == 'recovered' then
  for i = 2, #ARGV do
    local field = 'b:' .. ARGV[i]
    local _, _, cause = backoff_left(redis.call('HGET', throttle_key, field), now, 1)
    if cause == 'l' then
      redis.call('HDEL', throttle_key, field)
      out[#out + 1] = ARGV[i]
      out[#out + 1] = 0
    end
  end
  return out
end
local longest, half_life = tonumber(ARGV[2]), tonumber(ARGV[3])
for i = 4, #ARGV - 3, 4 do
  local site, floor, first = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local field = 'b:' .. site
  local raw = redis.call('HGET', throttle_key, field)
  local current, at, was = backoff_left(raw, now, half_life)
  if current < 10 then was = '' end
  local cause = was
  if cause ~= 's' then cause = ARGV[i + 3] end
  if current >= 10 and now - at < current and cause ~= was then
    -- not raised again so soon, but a status now shares the blame: it will decay
    redis.call('HSET', throttle_key, field, string.match(raw, '^(%d+:%d+)') .. ':' .. cause)
  end
  if current < 10 or now - at >= current then
    local raised = math.min(longest, math.max(first, current * 2))
    raised = math.floor(math.max(raised, floor))
    redis.call('HSET', throttle_key, field, raised .. ':' .. now .. ':' .. cause)
    out[#out + 1] = site
    out[#out + 1] = raised
  end
end
return out
