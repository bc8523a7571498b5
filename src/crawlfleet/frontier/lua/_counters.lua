-- Library (prepended to scripts whose header says "-- uses: counters"): the job's
-- counters hash, robust to a field that is not a number (a hand edit, a bug) and to a
-- count that drifted: a counter that cannot be read counts as 0; one that cannot be
-- incremented starts over from this change, and one that a decrement would take below 0
-- is set to 0. Each such repair is noted in REPAIRS (key, field, old value, new value)
-- and counted in the hash's "repaired" field, so a bad counter costs a figure, never
-- the crawl. A script that uses this library is run wrapped (crawlfleet.redis.scripts):
-- its reply comes back as {REPAIRS, reply}, and the caller logs each repair.

-- {key, field, old, new, ...} of the repairs made by this call
local REPAIRS = {}

-- note that *field* of *key* was *old* (as stored) and is now *new*
local function note_repair(key, field, old, new)
  REPAIRS[#REPAIRS + 1] = key
  REPAIRS[#REPAIRS + 1] = field
  REPAIRS[#REPAIRS + 1] = tostring(old)
  REPAIRS[#REPAIRS + 1] = tostring(new)
  redis.call('HINCRBY', key, 'repaired', 1)
end

-- the counter's value (0: absent or not a number)
local function counter(key, field)
  return tonumber(redis.call('HGET', key, field) or '0') or 0
end

-- add n to the counter; its new value (never below 0: a counter that would go below
-- is repaired to 0)
local function count(key, field, n)
  local r = redis.pcall('HINCRBY', key, field, n)
  if type(r) == 'table' and r.err then
    local old = redis.call('HGET', key, field)
    local new = math.max(0, n)
    redis.call('HSET', key, field, new)
    note_repair(key, field, old, new)
    return new
  end
  if r < 0 and n < 0 then
    redis.call('HSET', key, field, 0)
    note_repair(key, field, r - n, 0)
    return 0
  end
  return r
end
