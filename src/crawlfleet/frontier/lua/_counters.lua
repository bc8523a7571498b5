-- Library (prepended to scripts whose header says "-- uses: counters"): the job's
-- counters hash, robust to a field that is not a number (a hand edit, a bug): a
-- counter that cannot be read counts as 0, and one that cannot be incremented starts
-- over from this change (the hash's "repaired" field counts how often), so a bad
-- counter costs a figure, never the crawl.

-- the counter's value (0: absent or not a number)
local function counter(key, field)
  return tonumber(redis.call('HGET', key, field) or '0') or 0
end

-- add n to the counter; its new value
local function count(key, field, n)
  local r = redis.pcall('HINCRBY', key, field, n)
  if type(r) == 'table' and r.err then
    redis.call('HSET', key, field, n)
    redis.call('HINCRBY', key, 'repaired', 1)
    return n
  end
  return r
end
