"""A plain spider for crawling any site completely: every ``<a href>`` of every HTML page
that stays on the start URL's origin (or, with the ``prefixes`` argument, under one of
those URL prefixes: a part of a site), one ``{"url": ..., "at": ...}`` item per response
(``at``: the wall-clock time its headers arrived, about when the server answered).

It imports nothing from crawlfleet (it runs under vanilla Scrapy too). The ``redis-cpu``
part of ``crawlfleet bench`` crawls a real site with it (``--redis-cpu-url``) and checks
the URLs of its items: every page fetched once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import scrapy
from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.http import HtmlResponse, Response

__all__ = ["LINK_SPIDER", "LinkSpider", "read_link_items"]

#: The spider as a node or a vanilla process loads it.
LINK_SPIDER = "crawlfleet.benchmark.linkspider:LinkSpider"


class LinkSpider(scrapy.Spider):
    """Follows every same-origin ``<a href>`` from ``start_urls`` (comma-separated), or
    only those under ``prefixes`` (comma-separated URL prefixes) when given."""

    name = "links"

    def __init__(
        self, name: str | None = None, start_urls: str = "", prefixes: str = "", **kwargs: Any
    ) -> None:
        super().__init__(name, **kwargs)
        self.start_urls = _split(start_urls)
        if not self.start_urls:
            raise ValueError("LinkSpider needs the start_urls argument")
        self.origins = {urlsplit(url)[:2] for url in self.start_urls}
        self.prefixes = tuple(_split(prefixes))

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> LinkSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.answered, signal=signals.headers_received)
        return spider

    def answered(self, headers: Any, body_length: Any, request: Request, spider: Any) -> None:
        """``headers_received``: note when *request* was answered (its item's ``at``)."""
        request.meta["answered_at"] = time.time()

    def follows(self, url: str) -> bool:
        """Whether *url* is part of the crawl."""
        if self.prefixes:
            return url.startswith(self.prefixes)
        return urlsplit(url)[:2] in self.origins

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        yield {"url": response.url, "at": response.meta.get("answered_at")}
        if not isinstance(response, HtmlResponse):
            return
        for href in response.css("a::attr(href)").getall():
            try:
                request = response.follow(href, callback=self.parse)
            except ValueError:
                continue
            if self.follows(request.url):
                yield request


def _split(urls: str) -> list[str]:
    return [url.strip() for url in urls.split(",") if url.strip()]


def read_link_items(paths: list[Path]) -> tuple[list[str], list[float]]:
    """The URLs of the items in the JSON-lines files *paths* (one per response: a URL
    fetched twice is there twice; a missing file is a process that wrote none), and the
    times their responses were answered (``at``, where the item has one)."""
    urls: list[str] = []
    times: list[float] = []
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                item = json.loads(line)
                urls.append(item["url"])
                if isinstance(item.get("at"), (int, float)):
                    times.append(item["at"])
    return urls, times
