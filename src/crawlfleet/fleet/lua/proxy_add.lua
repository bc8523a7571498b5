-- proxy_add: proxies into the fleet's pool; one that left it (used up, failed, removed)
-- is not taken back. One in the pool whose URL is kept in the clear (by an earlier
-- crawlfleet) takes the given form when that is sealed ("sealed:v1:...").
--
-- KEYS[1] all    hash  proxy id -> proxy URL (sealed where it holds credentials)
-- KEYS[2] live   zset  proxy id -> uses
-- KEYS[3] gone   hash  proxy id -> why it left the pool
-- ARGV pairs: proxy id, proxy URL
-- Returns {proxies added, proxies in the pool}.

local all_key, live_key, gone_key = KEYS[1], KEYS[2], KEYS[3]
local added = 0
for i = 1, #ARGV, 2 do
  local id, url = ARGV[i], ARGV[i + 1]
  if redis.call('HEXISTS', gone_key, id) == 0 and redis.call('ZSCORE', live_key, id) == false then
    redis.call('HSET', all_key, id, url)
    redis.call('ZADD', live_key, 0, id)
    added = added + 1
  elseif string.sub(url, 1, 7) == 'sealed:' then
    local kept = redis.call('HGET', all_key, id)
    if kept and string.sub(kept, 1, 7) ~= 'sealed:' then
      redis.call('HSET', all_key, id, url)
    end
  end
end
return {added, redis.call('ZCARD', live_key)}
