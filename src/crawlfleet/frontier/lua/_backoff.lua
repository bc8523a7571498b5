-- Library (prepended to scripts whose header says "-- uses: backoff"): a site's
-- adaptive back-off as stored in the job's throttle hash, "b:<site>" ->
-- "<interval ms>:<set at ms>:<cause>" (cause "s": a status such as 429 or 503, "l": the
-- site's latency alone). The interval halves every half-life since it was set.

-- (interval left now, time it was set, cause); (0, 0, "") when the site has none
local function backoff_left(raw, now, half_life)
  if not raw then return 0, 0, '' end
  local ms, at, cause = string.match(raw, '^(%d+):(%d+):?(%a*)')
  if not ms then return 0, 0, '' end
  ms, at = tonumber(ms), tonumber(at)
  return ms * math.pow(0.5, math.max(0, now - at) / half_life), at, cause
end
