-- expired: list leases whose deadline has passed on the Redis clock (read only).
--
-- KEYS[1] leases    zset  rid -> lease deadline (ms)
-- KEYS[2] req       hash  rid -> "<score>\0<site>\0<payload>"
-- ARGV[1] most leases to return
-- Returns {rid, site, rid, site, ...}; site is "" for an entry whose request is gone.
-- The caller passes these to requeue.lua with the sites' queue keys; requeue checks
-- the deadline again, so a lease renewed in between is left alone.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now, 'LIMIT', 0, tonumber(ARGV[1]))
local out = {}
for _, rid in ipairs(rids) do
  local entry = redis.call('HGET', KEYS[2], rid)
  local site = ''
  if entry then
    local a = string.find(entry, '\0', 1, true)
    local b = string.find(entry, '\0', a + 1, true)
    site = string.sub(entry, a + 1, b - 1)
  end
  out[#out + 1] = rid
  out[#out + 1] = site
end
return out
