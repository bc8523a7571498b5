-- Library (prepended to scripts whose header says "-- uses: entry"): a stored request.
-- In the req hash (leased, waiting, or queued at a priority other than 0) its value is
-- "<score>\0<site>\0<payload>"; queued at priority 0 it is an item "<rid>\0<payload>"
-- of its site's FIFO list, and the rid is its sequence number (score = rid mod 2^32).
-- A revisit (a tracked page kept for its next visit, see commit.lua) has REVISIT_MARK
-- after its score ("123.\0<site>\0<payload>": still a number to every reader), so
-- that the reclaim queues it in its site's revisit list, not among new URLs, without
-- another key or round trip; queued, it is an item of that list (see _pop.lua).

local SEQ_SPAN = 4294967296
local REVISIT_MARK = '.'

-- {key, rid, ...}: requests whose entry in *key* was gone when a script came to them (a
-- hand edit, a bug): dropped. A script that uses counters too returns it to its caller,
-- who logs each one (see _counters.lua).
local GONE = {}

local function note_gone(key, rid)
  GONE[#GONE + 1] = key
  GONE[#GONE + 1] = rid
end

-- (score, site, payload) of *entry*; nil when it is absent or malformed (no
-- separators, no numeric score): such an entry is set aside, never allowed to stop a
-- script
local function entry_parts(entry)
  if not entry then return nil end
  local a = string.find(entry, '\0', 1, true)
  if not a then return nil end
  local b = string.find(entry, '\0', a + 1, true)
  if not b then return nil end
  local score = tonumber(string.sub(entry, 1, a - 1))
  if not score then return nil end
  return score, string.sub(entry, a + 1, b - 1), string.sub(entry, b + 1)
end

-- whether *entry* (a well-formed one) is a revisit's: its score ends with REVISIT_MARK
local function entry_revisit(entry)
  local a = string.find(entry, '\0', 1, true)
  return a ~= nil and a > 1 and string.sub(entry, a - 1, a - 1) == REVISIT_MARK
end

-- what is wrong with *entry* (nil: nothing), for the log of whoever sets it aside;
-- the same words as records.entry_fault
local function entry_fault(entry)
  if not entry then return 'its entry is gone' end
  local a = string.find(entry, '\0', 1, true)
  if not a then return 'no separator (not "<score>\\0<site>\\0<payload>")' end
  local b = string.find(entry, '\0', a + 1, true)
  if not b then return 'one separator only (not "<score>\\0<site>\\0<payload>")' end
  local head = string.sub(entry, 1, a - 1)
  if not tonumber(head) then
    return "score '" .. string.sub(head, 1, 40) .. "' is not a number"
  end
  return nil
end

-- whether a request of this score goes to its site's FIFO list (priority 0)
local function fifo_score(score)
  return score >= 0 and score < SEQ_SPAN
end

-- put requests of one site back in its FIFO list at its head, in sequence order:
-- *items* is a list of {seq, item}
local function fifo_push_front(list, items)
  table.sort(items, function(x, y) return x[1] > y[1] end)
  for _, it in ipairs(items) do redis.call('LPUSH', list, it[2]) end
end
