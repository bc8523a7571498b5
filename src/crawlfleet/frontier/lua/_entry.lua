-- Library (prepended to scripts whose header says "-- uses: entry"): a stored request,
-- req hash value "<score>\0<site>\0<payload>".

-- (score, site) of *entry*; nil when it is absent or malformed (no separators, no
-- numeric score): such an entry is set aside, never allowed to stop a script
local function entry_parts(entry)
  if not entry then return nil end
  local a = string.find(entry, '\0', 1, true)
  if not a then return nil end
  local b = string.find(entry, '\0', a + 1, true)
  if not b then return nil end
  local score = tonumber(string.sub(entry, 1, a - 1))
  if not score then return nil end
  return score, string.sub(entry, a + 1, b - 1)
end
