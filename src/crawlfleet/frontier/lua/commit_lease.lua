-- commit_lease: a node's round in one call: its commit (commit.lua), then its lease
-- (lease.lua), atomically, on one Redis. It does exactly what the two calls in turn
-- do (the lease sees what the commit queued and acknowledged), for one script call
-- and one round trip instead of two.
-- uses: commit, lease, seen, pace, pop, backoff, entry, counters, batch, clock
--
-- KEYS: the commit's keys (as commit.lua takes them), then the lease's (lease.lua)
-- ARGV: the commit's arguments (commit.lua), then the lease's (lease.lua), then C, how
--       many of KEYS are the commit's, and D, how many of ARGV
-- The commit reads its keys and arguments where they are (they come first, and it
-- never counts them): only the lease's few are copied, not a round's many links.
-- Returns {the commit's reply, the lease's reply} (see _commit.lua, _lease.lua)

local n = #ARGV
local c, d = tonumber(ARGV[n - 1]), tonumber(ARGV[n])
local lease_keys, lease_args = {}, {}
for i = c + 1, #KEYS do lease_keys[i - c] = KEYS[i] end
for i = d + 1, n - 2 do lease_args[i - d] = ARGV[i] end
local committed = commit_run(KEYS, ARGV)
return {committed, lease_run(lease_keys, lease_args)}
