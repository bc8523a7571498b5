-- Library (prepended to scripts whose header says "-- uses: clock"): Redis's own clock,
-- the one every node of the fleet agrees on (a node's wall clock may be wrong). TIME is
-- read once per call of a script, and only if the script asks for the time: every
-- later ask returns that same instant, so one call sees one "now".

local CLOCK_S, CLOCK_US

-- now on Redis's clock, in µs
local function now_us()
  if not CLOCK_S then
    local t = redis.call('TIME')
    CLOCK_S, CLOCK_US = tonumber(t[1]), tonumber(t[2])
  end
  return CLOCK_S * 1000000 + CLOCK_US
end

-- now on Redis's clock, in whole ms
local function now_ms()
  now_us()
  return CLOCK_S * 1000 + math.floor(CLOCK_US / 1000)
end
