-- seeds_read: read a batch of a seed key (a scrapy-redis start-URL key: a list, a set or
-- a sorted set) for one node, which holds the key's reader lock while it queues them:
-- one node reads a key at a time. The entries stay in the key until seeds_done removes
-- them (a node that dies in between leaves them to the next reader; the seen-filter
-- drops what it had queued already).
--
-- KEYS[1] seed       list, set or zset (the user's own, e.g. "<spider>:start_urls")
-- KEYS[2] reader     string  node id of the node reading KEYS[1] (expires)
-- ARGV[1] node id    ARGV[2] entries at most    ARGV[3] lock time-to-live (ms)
-- Returns {kind, entries in the key, entry ...}: kind is "list", "set", "zset" (the
-- entries read: a list from its head, as scrapy-redis pops it; a zset highest score
-- first, as scrapy-redis does; a set any N of them), "none" (no such key), "busy"
-- (another node holds the lock: nothing read) or the key's type when it is another.

local seed_key, reader_key = KEYS[1], KEYS[2]
local kind = redis.call('TYPE', seed_key)['ok']
local size = 0
if kind == 'list' then
  size = redis.call('LLEN', seed_key)
elseif kind == 'set' then
  size = redis.call('SCARD', seed_key)
elseif kind == 'zset' then
  size = redis.call('ZCARD', seed_key)
else
  return {kind, 0}
end
local holder = redis.call('GET', reader_key)
if holder and holder ~= ARGV[1] then
  return {'busy', size}
end
redis.call('SET', reader_key, ARGV[1], 'PX', tonumber(ARGV[3]))
local n = tonumber(ARGV[2])
local entries
if kind == 'list' then
  entries = redis.call('LRANGE', seed_key, 0, n - 1)
elseif kind == 'set' then
  entries = redis.call('SRANDMEMBER', seed_key, n)
else
  entries = redis.call('ZREVRANGE', seed_key, 0, n - 1)
end
local reply = {kind, size}
for i = 1, #entries do
  reply[#reply + 1] = entries[i]
end
return reply
