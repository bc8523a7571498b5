-- pace: the first half of a lease on a Redis Cluster, where a job's keys and the
-- fleet's politeness keys live in different slots (on one Redis, lease.lua does both
-- halves at once): reserve each offered site's slots on its budget's schedule. The
-- node then takes the requests from the job's slot (lease_paced.lua) and gives back
-- the slots it could not fill (pace_return.lua).
-- uses: pace, backoff, clock
--
-- KEYS[1] pace      hash  (see _pace.lua)
-- KEYS[2] throttle  hash  (see _pace.lua)
--
-- ARGV[1] N, most requests in all      ARGV[2] most requests per site
-- ARGV[3 .. 8] as lease.lua's ARGV[6 .. 11]: back-off half-life (ms), robots probe
--         (ms), horizon (µs), late share, most slots per rate-limited site, lead (µs)
-- ARGV[9 ..] the offer, as lease.lua's: quadruples of site, configured interval (µs),
--            budget, lateness (µs)
-- Returns {now (µs), {take, first slot (µs after now; -1: any time), interval (µs),
-- late (µs), budget, last slot reserved ("" when none), what was there before ("":
-- nothing), probing ("1"/"0")} per offered site, in order, µs until the first site
-- skipped is ready (-1: none), {sites whose back-off ended}}
-- A site is reserved as if all its slots will be used: N in all, at most the per-site
-- share each.

local pace_key, throttle_key = KEYS[1], KEYS[2]
local now = now_us()
local want, per_site = tonumber(ARGV[1]), tonumber(ARGV[2])
pace_init(pace_key, throttle_key, now, tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]),
          tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]))
local out, reserved = {}, 0
for i = 9, #ARGV - 3, 4 do
  local site = ARGV[i]
  local take, first, interval, late, probing, budget =
    pace_site(site, tonumber(ARGV[i + 1]), ARGV[i + 2], tonumber(ARGV[i + 3]),
              math.max(0, math.min(per_site, want - reserved)))
  local last, before = '', ''
  if take > 0 then
    before = pace_use(site, budget, first, interval, probing, take) or ''
    if probing then
      last = redis.call('HGET', throttle_key, 'p:' .. site)
    elseif interval > 0 then
      last = digits(first + (take - 1) * interval)
    end
    reserved = reserved + take
  end
  out[#out + 1] = {take, pace_slot(first, interval, probing, 0), interval,
                   (interval > 0 and not probing) and late or 0, budget, last, before,
                   probing and '1' or '0'}
end
return {now, out, PACE.ready_in, PACE.ended}
