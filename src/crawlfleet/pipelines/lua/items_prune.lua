-- items_prune: forget consumers of an item-stream group that hold no pending entries
-- and have not read for a while: workers that stopped, or died and whose entries
-- another worker claimed. Only consumers without pending entries are deleted, so no
-- entry ever loses its place in the group's pending list.
--
-- KEYS[1] items   stream  item records
--
-- ARGV[1] group   ARGV[2] idle time (ms) after which an empty consumer is forgotten
-- ARGV[3] the calling consumer (never deleted)
-- Returns the names of the consumers deleted.

local items_key = KEYS[1]
local group, idle, caller = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local gone = {}
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', items_key, group)) do
  local name, pending, quiet
  for j = 1, #c, 2 do
    if c[j] == 'name' then name = c[j + 1] end
    if c[j] == 'pending' then pending = tonumber(c[j + 1]) end
    if c[j] == 'idle' then quiet = tonumber(c[j + 1]) end
  end
  if name ~= caller and pending == 0 and quiet > idle then
    redis.call('XGROUP', 'DELCONSUMER', items_key, group, name)
    gone[#gone + 1] = name
  end
end
return gone
