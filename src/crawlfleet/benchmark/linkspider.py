"""A plain spider for crawling any site completely: every ``<a href>`` of every HTML page
that stays on the start URL's origin, one ``{"url": ...}`` item per response.

It imports nothing from crawlfleet (it runs under vanilla Scrapy too). The ``redis-cpu``
part of ``crawlfleet bench`` crawls a real site with it (``--redis-cpu-url``) and checks
the URLs of its items: every page fetched once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import scrapy
from scrapy.http import HtmlResponse, Response

__all__ = ["LinkSpider"]


class LinkSpider(scrapy.Spider):
    """Follows every same-origin ``<a href>`` from ``start_urls`` (comma-separated)."""

    name = "links"

    def __init__(self, name: str | None = None, start_urls: str = "", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.start_urls = [url.strip() for url in start_urls.split(",") if url.strip()]
        if not self.start_urls:
            raise ValueError("LinkSpider needs the start_urls argument")
        self.origins = {urlsplit(url)[:2] for url in self.start_urls}

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        yield {"url": response.url}
        if not isinstance(response, HtmlResponse):
            return
        for href in response.css("a::attr(href)").getall():
            try:
                request = response.follow(href, callback=self.parse)
            except ValueError:
                continue
            if urlsplit(request.url)[:2] in self.origins:
                yield request
