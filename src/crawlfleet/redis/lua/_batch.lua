-- Library (prepended to scripts whose header says "-- uses: batch"): variadic calls
-- over lists of any length, and the leases of a list that are still a node's. A call's
-- arguments come from unpack(), which the Lua stack bounds (about 8,000 values): a long
-- list goes in calls of BATCH items.

-- most items one call carries (an even number: field/value and score/member pairs stay
-- in one call)
local BATCH = 1000

-- redis.call(cmd, key, [opt,] items...) over all of *items*, BATCH a call; the last
-- call's reply (nil: *items* empty, nothing called)
local function call_batched(items, cmd, key, opt)
  local reply
  for first = 1, #items, BATCH do
    local last = math.min(#items, first + BATCH - 1)
    if opt then
      reply = redis.call(cmd, key, opt, unpack(items, first, last))
    else
      reply = redis.call(cmd, key, unpack(items, first, last))
    end
  end
  return reply
end

-- the rids among args[first .. last] whose lease is *node*'s (hash *owner*: rid ->
-- node), each once, in order; their owners read BATCH at a time, not one call a rid
local function owned_by(owner, node, args, first, last)
  local mine, taken = {}, {}
  for from = first, last, BATCH do
    local to = math.min(last, from + BATCH - 1)
    local owners = redis.call('HMGET', owner, unpack(args, from, to))
    for i = from, to do
      local rid = args[i]
      if owners[i - from + 1] == node and not taken[rid] then
        taken[rid] = true
        mine[#mine + 1] = rid
      end
    end
  end
  return mine
end
