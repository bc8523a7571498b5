"""crawlfleet.spiders."""
