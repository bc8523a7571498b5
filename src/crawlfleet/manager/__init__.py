"""crawlfleet.manager."""
