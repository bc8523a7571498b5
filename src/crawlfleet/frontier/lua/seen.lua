-- seen: check (and optionally record) fingerprints in the job's seen-filter without
-- queueing anything. Used by seeding tools, `crawlfleet job` and the benchmark.
-- uses: seen
--
-- KEYS[1 .. S]  seen-filter keys (layout per seen library)
-- ARGV[1] "add" or "check"   ARGV[2] P (seen parameters)   then P parameters,
-- then fingerprints.
-- Returns {count of fingerprints seen before, new bloom layers, flags}: flags is a
-- string with one character per fingerprint, "1" seen before, "0" new.

local add = ARGV[1] == 'add'
local P = tonumber(ARGV[2])
local seen_args = {}
for i = 1, P do seen_args[i] = ARGV[2 + i] end
seen_init(KEYS, seen_args)
local hits, flags = 0, {}
for i = 3 + P, #ARGV do
  local was
  if add then was = 1 - seen_add(ARGV[i]) else was = seen_has(ARGV[i]) end
  hits = hits + was
  flags[#flags + 1] = was == 1 and '1' or '0'
end
seen_finish()
return {hits, seen_new_layers(), table.concat(flags)}
