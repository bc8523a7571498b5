"""Write the crawl's final stats as JSON to ``CRAWLFLEET_STATS_FILE`` when the spider
closes (for benchmarks and for operators who collect them); disabled when empty."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scrapy import Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured

__all__ = ["StatsFile"]


class StatsFile:
    def __init__(self, path: Path, stats: Any) -> None:
        self.path = path
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> StatsFile:
        path = str(crawler.settings.get("CRAWLFLEET_STATS_FILE") or "")
        if not path:
            raise NotConfigured  # off by default: no argument, so Scrapy logs no warning
        ext = cls(Path(path), crawler.stats)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def spider_closed(self, spider: Spider, reason: str) -> None:
        stats = dict(self.stats.get_stats())
        stats["finish_reason"] = reason
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(stats, default=str, indent=1, sort_keys=True))
