-- proxy_report: what became of a request sent through a proxy.
-- uses: clock
--
-- KEYS[1] live   zset  proxy id -> uses (see proxy_pick.lua)
-- KEYS[2] cool   zset  proxy id -> end of its cool-down (ms)
-- KEYS[3] bans   zset  "<site>|<proxy id>" -> end of the site's ban of the proxy (ms)
-- KEYS[4] gone   hash  proxy id -> why it left the pool
-- KEYS[5] stats  hash  "<id>:ok", "<id>:fail", "<id>:ban", "<id>:streak" (failures of
--                      the proxy itself in a row), "<site>|<id>:streak" (failures on
--                      that site in a row), "<site>|<id>:ban" -> counts
--
-- ARGV[1] proxy id   ARGV[2] outcome:
--   "ok"   the site answered;
--   "dead" the proxy itself failed (refused the connection, unknown host, refused the
--          tunnel or the credentials): it rests, and after ARGV[5] in a row leaves the
--          pool;
--   "fail" the request failed through it in a way that may be the site's (timed out,
--          dropped, a 502/504 gateway answer): the proxy rests for that site only, and
--          after ARGV[5] in a row on the site is kept away from it as after a ban;
--   "ban"  the site refused the crawler through it: kept away from that site.
-- ARGV[3] site   ARGV[4] rest (ms) after a failure   ARGV[5] failures in a row
-- ARGV[6] how long (ms) a site's ban keeps the proxy away from that site
-- Returns "ok", "cooling", "evicted", "banned" or "gone" (it had left the pool already).

local live_key, cool_key, bans_key, gone_key, stats_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local now = now_ms()
local id, outcome, site = ARGV[1], ARGV[2], ARGV[3]
local cool_ms, max_fail, ban_ms = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local pair = site .. '|' .. id
if outcome == 'ok' then
  redis.call('HINCRBY', stats_key, id .. ':ok', 1)
  redis.call('HDEL', stats_key, id .. ':streak', pair .. ':streak')
  return 'ok'
end
if outcome == 'ban' then
  redis.call('HINCRBY', stats_key, id .. ':ban', 1)
  redis.call('HINCRBY', stats_key, pair .. ':ban', 1)
  redis.call('ZADD', bans_key, now + ban_ms, pair)
  return 'banned'
end
redis.call('HINCRBY', stats_key, id .. ':fail', 1)
if redis.call('HEXISTS', gone_key, id) == 1 then return 'gone' end
if outcome == 'fail' then
  local streak = redis.call('HINCRBY', stats_key, pair .. ':streak', 1)
  if streak >= max_fail then
    redis.call('HDEL', stats_key, pair .. ':streak')
    redis.call('ZADD', bans_key, now + ban_ms, pair)
    return 'banned'
  end
  redis.call('ZADD', bans_key, now + cool_ms, pair)
  return 'cooling'
end
local streak = redis.call('HINCRBY', stats_key, id .. ':streak', 1)
if streak >= max_fail then
  redis.call('ZREM', live_key, id)
  redis.call('ZREM', cool_key, id)
  redis.call('HSET', gone_key, id, 'failed')
  return 'evicted'
end
redis.call('ZADD', cool_key, now + cool_ms, id)
return 'cooling'
