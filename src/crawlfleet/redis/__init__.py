"""crawlfleet.redis."""
