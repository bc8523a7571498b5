"""A loopback site where some pages fail, and a spider for it, for the error registry's
tests: ``/`` links to ``/ok``, ``/flaky`` (503 until ``site.flaky_fixed`` is set),
``/missing`` (404) and ``/boom`` (a page the spider's callback fails on)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import scrapy
from scrapy.http import Response

from tests.support.loopback import LoopbackSite

__all__ = ["FailingSite", "FailingSpider"]

LINKS = ("/ok", "/flaky", "/missing", "/boom")


class FailingSite(LoopbackSite):
    """``with FailingSite() as site: site.url``; ``site.hits`` counts requests by path,
    ``site.times`` lists their arrival times."""

    def __init__(self) -> None:
        self.flaky_fixed = threading.Event()
        super().__init__(self._page)

    def _page(self, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        status = 200
        if path == "/missing":
            status = 404
        elif path == "/flaky" and not self.flaky_fixed.is_set():
            status = 503
        links = "".join(f'<a href="{p}">{p}</a>' for p in LINKS) if path == "/" else ""
        return status, f"<html><title>{path}</title><body>{links}</body></html>".encode()


class FailingSpider(scrapy.Spider):
    """Follows the links of ``/``; its callback raises on ``/boom``."""

    name = "failing"

    def __init__(self, start_urls: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start_urls]

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        if response.url.endswith("/boom"):
            raise ValueError("cannot parse this page")
        yield {"url": response.url, "title": response.css("title::text").get()}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
