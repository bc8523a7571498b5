"""A plain Scrapy spider for the bundled test site.

It imports nothing from crawlfleet, so it runs under vanilla Scrapy too::

    scrapy runspider spider.py -a start_urls=http://127.0.0.1:8080/,http://127.0.0.2:8080/

Start URLs come from the ``start_urls`` spider argument (comma-separated) or else from
the ``TESTSITE_START_URLS`` setting (a list). It follows every ``<a href>`` of every HTML
page and yields one item per product page (``url``, ``title``, ``price``, ``date``,
``sku``) and per article page (``url``, ``headline``, ``author``, ``date``); on a
changing site (``crawlfleet site --changing``) these items also have ``updated_at``, the
page's timestamp (ISO time; on some pages the only thing that changes). Non-HTML
responses yield nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.http import HtmlResponse, Response

__all__ = ["ITEMS", "OPTIONAL_FIELDS", "PAGINATION_PRIORITY", "TestSiteSpider"]

#: Priority of the catalogue's next-page links (other links: 0).
PAGINATION_PRIORITY = 10

#: The items of the site: the block that holds one -> its fields' CSS queries (a page
#: holds one kind, looked for in this order).
ITEMS: dict[str, dict[str, str]] = {
    "div.product": {
        "title": "h1.title::text",
        "price": "span.price::text",
        "date": "time::attr(datetime)",
        "sku": "span.sku::text",
        "updated_at": "time.updated::attr(datetime)",
    },
    "article.post": {
        "headline": "h1.headline::text",
        "author": "span.author::text",
        "date": "time::attr(datetime)",
        "updated_at": "time.updated::attr(datetime)",
    },
}
#: Fields left out of an item when its page has none (a static site has no timestamp).
OPTIONAL_FIELDS = frozenset({"updated_at"})


class TestSiteSpider(scrapy.Spider):
    """Crawls the test site completely; see the module docstring."""

    __test__ = False  # not a pytest test class
    name = "testsite"

    def __init__(
        self, name: str | None = None, start_urls: str | list[str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(name, **kwargs)
        if isinstance(start_urls, str):
            self.start_urls = [url.strip() for url in start_urls.split(",") if url.strip()]
        else:
            self.start_urls = list(start_urls or [])

    async def start(self) -> AsyncIterator[Any]:
        """Requests for the start URLs. Unlike Scrapy's default they go through the
        duplicate filter, so a later link to a root is not fetched a second time."""
        urls = self.start_urls or self.settings.getlist("TESTSITE_START_URLS")
        if not urls:
            raise ValueError("TestSiteSpider needs the start_urls argument or TESTSITE_START_URLS")
        for url in urls:
            yield scrapy.Request(url, callback=self.parse)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        if not isinstance(response, HtmlResponse):
            return
        item = self.extract_item(response)
        if item is not None:
            yield item
        # the catalogue's "next" link first: pagination is a chain, one page leads to the
        # next, and behind a long queue it would finish last, one page at a time
        for href in response.css("a[rel=next]::attr(href)").getall():
            yield from self._follow(response, href, PAGINATION_PRIORITY)
        for href in response.css("a:not([rel=next])::attr(href)").getall():
            yield from self._follow(response, href, 0)

    def _follow(self, response: Response, href: str, priority: int) -> Iterator[Any]:
        try:
            yield response.follow(href, callback=self.parse, priority=priority)
        except ValueError:
            self.logger.warning("bad link %r on %s", href, response.url)

    @staticmethod
    def extract_item(response: HtmlResponse) -> dict[str, Any] | None:
        """The product or article item of ``response``, or ``None`` if it has none."""
        for block, fields in ITEMS.items():
            found = response.css(block)
            if found:
                item: dict[str, Any] = {"url": response.url}
                for name, query in fields.items():
                    value = found.css(query).get()
                    if value is not None or name not in OPTIONAL_FIELDS:
                        item[name] = value
                return item
        return None
