-- Seen-filter library, exact mode: prepended by the loader to every script that says
-- "uses: seen". Binary fingerprints in one Redis set.
--
-- seen_init(keys, args): keys = {set}; args = {} (no parameters)
-- seen_add(fp) -> 1 when fp is new (and now recorded), 0 when it was seen before
-- seen_has(fp) -> 1 when fp was seen, 0 otherwise
-- seen_finish(), seen_new_layers(): nothing to do in this mode (see _seen_bloom.lua)

local SEEN_SET

local function seen_init(keys, args)
  SEEN_SET = keys[1]
end

local function seen_add(fp)
  return redis.call('SADD', SEEN_SET, fp)
end

local function seen_has(fp)
  return redis.call('SISMEMBER', SEEN_SET, fp)
end

local function seen_finish()
end

local function seen_new_layers()
  return 0
end
