"""crawlfleet.state."""
