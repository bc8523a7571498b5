-- lease: hand up to N queued requests to a node, fairly across the sites offered,
-- each leased until a deadline on the Redis clock; a request of a rate-limited site
-- comes with its send time (slot), on the budget's schedule.
-- uses: lease, pace, pop, backoff, counters, entry, batch, clock
--
-- KEYS, ARGV and the reply: lease_run's (_lease.lua).

return lease_run(KEYS, ARGV)
