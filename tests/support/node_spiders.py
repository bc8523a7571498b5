"""Spiders that node processes of the tests import (``tests.support.node_spiders:X``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import scrapy
from scrapy import signals

from crawlfleet.testsite.spider import TestSiteSpider

__all__ = [
    "BlockingSpider",
    "ContractSpider",
    "LanguageQuery",
    "LanguagesSpider",
    "ManyLinksSpider",
    "StartUrlsSpider",
]


class StartUrlsSpider(TestSiteSpider):
    """The test-site spider with Scrapy's default start(): start requests are
    dont_filter, yet each must enter the job once however many nodes start."""

    name = "starturls"

    async def start(self) -> Any:  # Scrapy's own implementation, not TestSiteSpider's
        async for item in scrapy.Spider.start(self):
            yield item


class BlockingSpider(TestSiteSpider):
    """The test-site spider on an overloaded node: every page blocks the event loop for
    ``block`` seconds (CPU work done wrong), so the node's loop lags."""

    name = "blocking"

    def __init__(self, block: str = "0.1", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.block = float(block)

    def parse(self, response: Any, **kwargs: Any) -> Any:
        time.sleep(self.block)
        return super().parse(response, **kwargs)


class ManyLinksSpider(scrapy.Spider):
    """Every page of ``base`` + ``/p/<n>`` (``pages`` of them) links to all of them
    ``links`` times over, each link costing ``per_link`` seconds of work as it is
    followed: a page's output keeps the event loop busy for pages x links x per_link."""

    name = "manylinks"

    def __init__(
        self,
        base: str = "",
        pages: str = "20",
        links: str = "5",
        per_link: str = "0.001",
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.base, self.pages, self.links = base, int(pages), int(links)
        self.per_link = float(per_link)

    async def start(self) -> Any:
        yield scrapy.Request(f"{self.base}/p/0")

    def parse(self, response: Any, **kwargs: Any) -> Iterator[scrapy.Request]:
        for n in range(self.pages * self.links):
            time.sleep(self.per_link)
            yield scrapy.Request(f"{self.base}/p/{n % self.pages}")


class ContractSpider(scrapy.Spider):
    """Checks Scrapy's scheduler contracts on one node; writes what it saw to ``out``."""

    name = "contract"
    custom_settings: ClassVar[dict[str, Any]] = {"CONCURRENT_REQUESTS": 1}

    def __init__(self, base: str = "", out: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base, self.out = base, out
        self.order: list[str] = []
        self.dropped: list[str] = []

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> ContractSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.on_dropped, signal=signals.request_dropped)
        return spider

    def on_dropped(self, request: scrapy.Request, spider: Any) -> None:
        self.dropped.append(request.url)

    async def start(self) -> Any:
        yield scrapy.Request(self.base + "/", callback=self.first)

    def first(self, response: Any) -> Iterator[scrapy.Request]:
        page = self.base + "/p/{}"  # pages 3, 6, 9, 12 live on the first host
        yield scrapy.Request(page.format(3), callback=self.record)
        yield scrapy.Request(page.format(3), callback=self.record)  # duplicate: dropped
        yield scrapy.Request(page.format(6), callback=self.record, dont_filter=True)
        yield scrapy.Request(page.format(6), callback=self.record, dont_filter=True)
        yield scrapy.Request(page.format(9), callback=self.record, priority=10)
        yield scrapy.Request(page.format(12), callback=self.record, priority=-10)
        yield scrapy.Request(self.base + "/", callback=self.record)  # seen: dropped

    def record(self, response: Any) -> None:
        self.order.append(response.url)

    def closed(self, reason: str) -> None:
        stats = self.crawler.stats.get_stats()
        with open(self.out, "w") as f:
            json.dump(
                {
                    "order": self.order,
                    "dropped": self.dropped,
                    "reason": reason,
                    "stats": {k: v for k, v in stats.items() if isinstance(v, int)},
                },
                f,
            )


class LanguagesSpider(scrapy.Spider):
    """Every page of ``base`` + ``/p/<n>`` (``pages`` of them) links to all of them, and
    to each again in German (``meta["lang"]``), which the project's own
    :class:`LanguageQuery` spider middleware turns into ``?lang=de``: a middleware that
    rewrites URLs on their way to the scheduler."""

    name = "languages"
    custom_settings: ClassVar[dict[str, Any]] = {
        "SPIDER_MIDDLEWARES": {"tests.support.node_spiders.LanguageQuery": 543}
    }

    def __init__(self, base: str = "", pages: str = "8", **kw: Any) -> None:
        super().__init__(**kw)
        self.base, self.pages = base, int(pages)

    async def start(self) -> Any:
        yield scrapy.Request(f"{self.base}/p/0")

    def parse(self, response: Any, **kwargs: Any) -> Iterator[scrapy.Request]:
        for n in range(self.pages):
            yield scrapy.Request(f"{self.base}/p/{n}")
            yield scrapy.Request(f"{self.base}/p/{n}", meta={"lang": "de"})


class LanguageQuery:
    """A project's spider middleware: a request for a language asks for it in its URL."""

    async def process_spider_output(self, response: Any, result: Any, spider: Any = None) -> Any:
        async for obj in result:
            lang = obj.meta.get("lang") if isinstance(obj, scrapy.Request) else None
            if lang and "?" not in obj.url:
                obj = obj.replace(url=f"{obj.url}?lang={lang}")
            yield obj
