-- Library (prepended to scripts whose header says "-- uses: pace"; needs backoff): a
-- site's pacing in a lease. Its interval is the largest of its configured one, its
-- robots.txt Crawl-delay and its current back-off; while a delay or back-off widens
-- it, a job's own budget ("...|job=<job>") is paced in the budget every job shares
-- (the name without it). Its slots follow one another by that interval on the
-- budget's schedule (the last slot granted, in the pace hash), starting at the
-- earliest a lead after now (the node's way to receive and place them), so a changed
-- interval applies to the very next slot; a site whose next
-- slot lies beyond the horizon is not ready. A site whose robots.txt no node has read
-- yet gives one request per robots probe. Call pace_init() first.
--
-- pace hash: budget -> its last slot granted (µs, Redis clock)
-- throttle hash: "b:<site>" -> back-off (_backoff.lua); "r:<site>" -> "<Crawl-delay
-- ms>:<when it became known ms>"; "p:<site>" -> end of the current robots probe (ms)

local PACE = {}
local ADAPTIVE_LATE_MIN_US = 50000

-- a time as digits: Redis may write a large Lua number in exponent form
local function digits(x) return string.format('%.0f', x) end

-- now: µs on the Redis clock; the rest as lease.lua's ARGV says
local function pace_init(pace_key, throttle_key, now, half_life, probe_ms, horizon,
                         late_share, max_slots, lead)
  PACE = {pace = pace_key, throttle = throttle_key, now = now,
          now_ms = math.floor(now / 1000), half_life = half_life, probe_ms = probe_ms,
          horizon = horizon, late_share = late_share, max_slots = max_slots,
          lead = lead, ready_in = -1, ended = {}}
end

local function pace_not_ready(wait)
  if PACE.ready_in < 0 or wait < PACE.ready_in then PACE.ready_in = wait end
end

-- the site's back-off now (ms), from its field *raw* ("b:<site>"; false: none); one
-- decayed below 10 ms is over and removed
local function pace_backoff(site, raw)
  if not raw then return 0 end
  local left = backoff_left(raw, PACE.now_ms, PACE.half_life)
  if left < 10 then
    redis.call('HDEL', PACE.throttle, 'b:' .. site)
    PACE.ended[#PACE.ended + 1] = site
    return 0
  end
  return math.floor(left)
end

-- (how many of its requests the site may send now, at most *take*; its first slot (µs,
-- Redis clock); the interval between its slots (µs; 0: none); how late a slot may be
-- sent (µs); whether this is a robots probe (slots at any time); the budget it is
-- paced in) for a site with a configured interval, budget and lateness
local function pace_site(site, configured, budget, late, take)
  local now, now_ms = PACE.now, PACE.now_ms
  local fields = redis.call('HMGET', PACE.throttle, 'r:' .. site, 'b:' .. site)
  local robots = fields[1]
  local probing = PACE.probe_ms > 0 and not robots
  local delay_ms, known_ms = string.match(robots or '0', '^(%d+):?(%d*)')
  local interval = math.max(configured, tonumber(delay_ms or '0') * 1000,
                            pace_backoff(site, fields[2]) * 1000)
  if interval > configured then
    budget = string.gsub(budget, '|job=.*$', '')
    late = math.max(late, math.floor(interval * PACE.late_share),
                    math.min(ADAPTIVE_LATE_MIN_US, math.floor(interval / 2)))
  end
  local first = now
  if probing then
    local probe_end = tonumber(redis.call('HGET', PACE.throttle, 'p:' .. site) or '0')
    if probe_end > now_ms then
      pace_not_ready((probe_end - now_ms) * 1000)
      take = 0
    else
      take = math.min(take, 1)  -- one probe at a time, and none for a lease that is full
    end
  elseif interval > 0 then
    first = now + PACE.lead
    local last = redis.call('HGET', PACE.pace, budget)
    if last then first = math.max(first, tonumber(last) + interval) end
    if known_ms and known_ms ~= '' then
      first = math.max(first, tonumber(known_ms) * 1000 + interval)
    end
    if first > now + PACE.horizon then
      pace_not_ready(first - now - PACE.horizon)
      take = 0
    else
      take = math.min(take, PACE.max_slots,
                      math.floor((now + PACE.horizon - first) / interval) + 1)
    end
  end
  return take, first, interval, late, probing, budget
end

-- the slot of the n-th request (0-based) of a site paced as pace_site said, in µs after
-- now (-1: any time)
local function pace_slot(first, interval, probing, n)
  if interval > 0 and not probing then return first + n * interval - PACE.now end
  return -1
end

-- n >= 1 of the site's slots from *first* are taken: its budget goes on from the last,
-- or its robots probe starts; returns what was there before (false: nothing)
local function pace_use(site, budget, first, interval, probing, n)
  if probing then
    local before = redis.call('HGET', PACE.throttle, 'p:' .. site)
    redis.call('HSET', PACE.throttle, 'p:' .. site, digits(PACE.now_ms + PACE.probe_ms))
    return before
  elseif interval > 0 then
    local before = redis.call('HGET', PACE.pace, budget)
    redis.call('HSET', PACE.pace, budget, digits(first + (n - 1) * interval))
    return before
  end
  return false
end
