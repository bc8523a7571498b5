-- commit_lease: a node's round in one call: its commit (commit.lua), then its lease
-- (lease.lua), atomically, on one Redis. It does exactly what the two calls in turn
-- do (the lease sees what the commit queued and acknowledged), for one script call
-- and one round trip instead of two.
-- uses: commit, lease, seen, pace, pop, backoff, entry, counters, clock
--
-- KEYS: the commit's keys (as commit.lua takes them), then the lease's (lease.lua)
-- ARGV[1] C, how many of KEYS are the commit's   ARGV[2] D, how many arguments follow
--         for the commit
-- ARGV[3 .. 2+D] the commit's arguments (commit.lua), then the lease's (lease.lua)
-- Returns {the commit's reply, the lease's reply} (see _commit.lua, _lease.lua)

local c, d = tonumber(ARGV[1]), tonumber(ARGV[2])
local commit_keys, commit_args, lease_keys, lease_args = {}, {}, {}, {}
for i = 1, c do commit_keys[i] = KEYS[i] end
for i = c + 1, #KEYS do lease_keys[i - c] = KEYS[i] end
for i = 1, d do commit_args[i] = ARGV[2 + i] end
for i = d + 3, #ARGV do lease_args[i - d - 2] = ARGV[i] end
local committed = commit_run(commit_keys, commit_args)
return {committed, lease_run(lease_keys, lease_args)}
