"""A downloader middleware that makes one node slower, for tests and the benchmark of
heterogeneous nodes: every request waits ``TESTSITE_EXTRA_LATENCY_SECONDS`` before it
is downloaded, holding its download slot meanwhile, as on a slow link.

Enable it on the slow node only::

    DOWNLOADER_MIDDLEWARES = {"crawlfleet.testsite.slowdown.ExtraLatency": 50}
    TESTSITE_EXTRA_LATENCY_SECONDS = 0.2
"""

from __future__ import annotations

import asyncio

from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured

from crawlfleet.exceptions import ConfigError

__all__ = ["ExtraLatency"]


class ExtraLatency:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ExtraLatency:
        try:
            seconds = crawler.settings.getfloat("TESTSITE_EXTRA_LATENCY_SECONDS", 0.0)
        except ValueError:
            raise ConfigError(
                "TESTSITE_EXTRA_LATENCY_SECONDS must be a number of seconds, got "
                f"{crawler.settings.get('TESTSITE_EXTRA_LATENCY_SECONDS')!r}"
            ) from None
        if seconds < 0:
            raise ConfigError(f"TESTSITE_EXTRA_LATENCY_SECONDS must be >= 0, got {seconds}")
        if seconds == 0:
            raise NotConfigured  # no extra latency (no message: Scrapy warns of one)
        return cls(seconds)

    async def process_request(self, request: Request, spider: Spider | None = None) -> None:
        await asyncio.sleep(self.seconds)
