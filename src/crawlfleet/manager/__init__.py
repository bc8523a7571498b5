"""The manager: one ASGI service (``crawlfleet manager serve``) that sees and steers the
whole fleet through Redis and keeps what must outlive Redis in the state DB. Nodes
never need it: a crawl runs with Redis alone."""
