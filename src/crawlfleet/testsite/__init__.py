"""crawlfleet.testsite."""
