-- trim_seeds: remove the first N entries of a seed list, if it still starts with the
-- entry the caller read (another node may have taken them already).
--
-- KEYS[1] seed list (the user's, e.g. "<spider>:start_urls", as in scrapy-redis)
-- ARGV[1] N     ARGV[2] the first entry as the caller read it
-- Returns 1 when trimmed, 0 when the list had changed.

if redis.call('LINDEX', KEYS[1], 0) == ARGV[2] then
  redis.call('LTRIM', KEYS[1], tonumber(ARGV[1]), -1)
  return 1
end
return 0
