-- proxy_pick: take the least used proxy of the fleet's pool that may serve a site now
-- (not resting after a failure, not kept away from that site), counting the use.
-- uses: clock
--
-- KEYS[1] all    hash  proxy id -> proxy URL (credentials included: never shown)
-- KEYS[2] live   zset  proxy id -> uses so far (the pool: least used first)
-- KEYS[3] cool   zset  proxy id -> end of its rest (ms, Redis clock)
-- KEYS[4] bans   zset  "<site>|<proxy id>" -> end of the site's ban (or rest) of it (ms)
-- KEYS[5] gone   hash  proxy id -> why it left the pool ("used", "failed", "removed")
--
-- ARGV[1] site   ARGV[2] most uses of a proxy (0: no limit)   ARGV[3] proxies read at a
-- time (the whole pool is looked through, in such pages, least used first)
-- Returns {id, url, uses, proxies left in the pool}; id "" when none may serve the site
-- now. A proxy that reaches its most uses leaves the pool ("used") with this use.

local all_key, live_key, cool_key, bans_key, gone_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local now = now_ms()
local site, max_uses, page = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', cool_key, '-inf', now)
redis.call('ZREMRANGEBYSCORE', bans_key, '-inf', now)
local size = redis.call('ZCARD', live_key)
local start = 0
while start < size do
  local candidates = redis.call('ZRANGE', live_key, start, start + page - 1)
  for _, id in ipairs(candidates) do
    if not redis.call('ZSCORE', cool_key, id)
       and not redis.call('ZSCORE', bans_key, site .. '|' .. id) then
      local url = redis.call('HGET', all_key, id)
      if url then
        local uses = tonumber(redis.call('ZINCRBY', live_key, 1, id))
        if max_uses > 0 and uses >= max_uses then
          redis.call('ZREM', live_key, id)
          redis.call('HSET', gone_key, id, 'used')
        end
        return {id, url, uses, redis.call('ZCARD', live_key)}
      end
    end
  end
  start = start + page
end
return {'', '', 0, size}
