"""``crawlfleet bench``: throughput against vanilla Scrapy, Redis traffic, memory."""
