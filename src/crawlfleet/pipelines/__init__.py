"""crawlfleet.pipelines."""
