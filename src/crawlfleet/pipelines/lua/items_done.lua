-- items_done: finish a batch of item-stream entries for one consumer group:
-- acknowledge the entries that were stored, move malformed or refused ones to the
-- dead-letter stream, and delete entries that no consumer group needs any more.
--
-- KEYS[1] items       stream  item records (entry format: crawlfleet.pipelines.stream)
-- KEYS[2] items_dead  stream  entries set aside: id, reason, group, consumer, then
--                             the entry's own fields as "entry:<name>"
--
-- ARGV[1] group   ARGV[2] consumer   ARGV[3] "1": delete entries every group is done
--         with, "0": keep them
-- ARGV[4] A (entries stored), then A entry ids, then pairs: entry id, reason (entries
--         to set aside)
-- Returns {acknowledged, set aside, deleted}
--
-- An entry is set aside only while it is still pending in the group (a worker that
-- claimed it meanwhile may have finished it), so it reaches the dead-letter stream at
-- most once per group. A group is done with an entry when it has read past it
-- (last-delivered-id) and does not hold it pending.

local items_key, items_dead_key = KEYS[1], KEYS[2]
local group, consumer, delete = ARGV[1], ARGV[2], ARGV[3] == '1'
local A = tonumber(ARGV[4])
local acked, moved, deleted = 0, 0, 0
local finished = {}

for i = 5, 4 + A do
  acked = acked + redis.call('XACK', items_key, group, ARGV[i])
  finished[#finished + 1] = ARGV[i]
end

for i = 5 + A, #ARGV, 2 do
  local id, reason = ARGV[i], ARGV[i + 1]
  local entry = redis.call('XRANGE', items_key, id, id)
  if redis.call('XACK', items_key, group, id) == 1 then
    local fields = {'id', id, 'reason', reason, 'group', group, 'consumer', consumer}
    if entry[1] then
      local kv = entry[1][2]
      for j = 1, #kv, 2 do
        fields[#fields + 1] = 'entry:' .. kv[j]
        fields[#fields + 1] = kv[j + 1]
      end
    end
    redis.call('XADD', items_dead_key, '*', unpack(fields))
    moved = moved + 1
  end
  finished[#finished + 1] = id
end

local function after(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am > bm or (am == bm and as > bs)
end

if delete and #finished > 0 then
  -- the other groups of the stream, with how far each has read
  local others = {}
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', items_key)) do
    local name, last
    for j = 1, #g, 2 do
      if g[j] == 'name' then name = g[j + 1] end
      if g[j] == 'last-delivered-id' then last = g[j + 1] end
    end
    if name ~= group then others[#others + 1] = {name, last} end
  end
  local doomed = {}
  for _, id in ipairs(finished) do
    local free = true
    for _, g in ipairs(others) do
      if after(id, g[2]) or #redis.call('XPENDING', items_key, g[1], id, id, 1) > 0 then
        free = false
        break
      end
    end
    if free then doomed[#doomed + 1] = id end
  end
  for i = 1, #doomed, 1000 do
    deleted = deleted + redis.call('XDEL', items_key, unpack(doomed, i, math.min(i + 999, #doomed)))
  end
end

return {acked, moved, deleted}
