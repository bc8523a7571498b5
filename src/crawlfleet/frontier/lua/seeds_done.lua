-- seeds_done: a node queued the entries it read with seeds_read: remove them from the
-- seed key, set the unreadable ones aside, and release the key's reader lock.
--
-- KEYS[1] seed key   list, set or zset
-- KEYS[2] reader     string  node id holding the lock (see seeds_read.lua)
-- KEYS[3] aside      list    unreadable entries, for the operator to look at
-- ARGV[1] node id    ARGV[2] kind read ("list", "set" or "zset")
-- ARGV[3] N: entries to remove, ARGV[4 .. 3+N]; then the unreadable ones (already among
-- those N) to append to KEYS[3]
-- Returns the entries removed (an entry gone already, taken by hand, is not counted).

local kind = ARGV[2]
local n = tonumber(ARGV[3])
local removed = 0
for i = 4, 3 + n do
  if kind == 'list' then
    removed = removed + redis.call('LREM', KEYS[1], 1, ARGV[i])
  elseif kind == 'set' then
    removed = removed + redis.call('SREM', KEYS[1], ARGV[i])
  elseif kind == 'zset' then
    removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
for i = 4 + n, #ARGV do
  redis.call('RPUSH', KEYS[3], ARGV[i])
end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
end
return removed
