-- commit: one batch from a node: acknowledge finished leases, set malformed entries
-- aside, keep finished leases for a later visit (revisits) or drop tracked ones for
-- good (untracks), and queue new requests whose fingerprint the seen-filter has not
-- seen.
-- uses: commit, seen, entry, counters, batch, clock
--
-- KEYS, ARGV and the reply: commit_run's (_commit.lua).

return commit_run(KEYS, ARGV)
