-- seeds_done: a node queued the entries it read with seeds_read: remove them from the
-- seed key, set the unreadable ones aside, and release the key's reader lock.
--
-- KEYS[1] seed       list, set or zset
-- KEYS[2] reader     string  node id holding the lock (see seeds_read.lua)
-- KEYS[3] unreadable list    unreadable entries, for the operator to look at
-- ARGV[1] node id    ARGV[2] kind read ("list", "set" or "zset")
-- ARGV[3] N: entries to remove, ARGV[4 .. 3+N]; then the unreadable ones (already among
-- those N) to append to KEYS[3]
-- Returns the entries removed (an entry gone already, taken by hand, is not counted).

local seed_key, reader_key, unreadable_key = KEYS[1], KEYS[2], KEYS[3]
local kind = ARGV[2]
local n = tonumber(ARGV[3])
local removed = 0
for i = 4, 3 + n do
  if kind == 'list' then
    removed = removed + redis.call('LREM', seed_key, 1, ARGV[i])
  elseif kind == 'set' then
    removed = removed + redis.call('SREM', seed_key, ARGV[i])
  elseif kind == 'zset' then
    removed = removed + redis.call('ZREM', seed_key, ARGV[i])
  end
end
for i = 4 + n, #ARGV do
  redis.call('RPUSH', unreadable_key, ARGV[i])
end
if redis.call('GET', reader_key) == ARGV[1] then
  redis.call('DEL', reader_key)
end
return removed
