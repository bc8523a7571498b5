"""A spider for the test site's date x category archive, for campaign tests: a unit's
listing pages are followed by their "next" links, each document gives an item."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import scrapy
from scrapy.http import Response

__all__ = ["ArchiveSpider"]


class ArchiveSpider(scrapy.Spider):
    name = "archive"

    async def start(self) -> Any:  # a campaign feeds the start requests
        return
        yield

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        for href in response.css("ol.archive-list a.doc::attr(href)").getall():
            yield response.follow(href, self.parse_doc)
        next_page = response.css("a.next::attr(href)").get()
        if next_page:
            yield response.follow(next_page, self.parse)

    def parse_doc(self, response: Response) -> Iterator[dict[str, Any]]:
        yield {
            "url": response.url,
            "title": response.css("h1.title::text").get(),
            "date": response.css("span.date::text").get(),
            "category": response.css("span.category::text").get(),
        }
