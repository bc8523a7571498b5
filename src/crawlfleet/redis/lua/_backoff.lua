-- Library (prepended to scripts whose header says "-- uses: backoff"): a site's
-- adaptive back-off as stored in the job's throttle hash, "b:<site>" ->
-- "<interval ms>:<set at ms>". The interval halves every half-life since it was set.

-- (interval left now, time it was set); (0, 0) when the site has no back-off
local function backoff_left(raw, now, half_life)
  if not raw then return 0, 0 end
  local sep = string.find(raw, ':', 1, true)
  local ms, at = tonumber(string.sub(raw, 1, sep - 1)), tonumber(string.sub(raw, sep + 1))
  return ms * math.pow(0.5, math.max(0, now - at) / half_life), at
end
