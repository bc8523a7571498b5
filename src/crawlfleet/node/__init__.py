"""crawlfleet.node."""
