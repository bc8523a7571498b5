"""A spider that renders pages with scrapy-playwright in Debian's chromium, for node
processes of the tests (``tests.support.rendered_spider:RenderedSpider``).

Its site (tests/node/test_plugins.py) writes every page's content with scripts: links,
names, an element that appears 200 ms after load, and a ``reveal(code)`` function that
writes a secret only when called. The page methods of each request wait for the late
element and call ``reveal`` with an argument: a page's item has both only when its
request reached the node that fetched it with ``playwright_page_methods`` intact.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.http import Response
from scrapy_playwright.page import PageMethod

from tests.support.chromium import CHROMIUM_ARGS, chromium_path

__all__ = ["SECRET", "RenderedSpider"]

SECRET = "s3cret"
HANDLER = "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler"


def page_methods() -> list[PageMethod]:
    return [
        PageMethod("wait_for_selector", "#late", state="attached"),
        PageMethod("evaluate", "code => window.reveal(code)", SECRET),
    ]


class RenderedSpider(scrapy.Spider):
    name = "rendered"
    custom_settings = {  # noqa: RUF012 - Scrapy's own attribute
        "DOWNLOAD_HANDLERS": {"http": HANDLER, "https": HANDLER},
        "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
        "PLAYWRIGHT_BROWSER_TYPE": "chromium",
        "PLAYWRIGHT_LAUNCH_OPTIONS": {
            "executable_path": chromium_path() or os.environ.get("CRAWLFLEET_CHROMIUM", ""),
            "headless": True,
            "args": CHROMIUM_ARGS,
        },
    }

    def __init__(self, start: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_url = start

    async def start(self) -> AsyncIterator[Any]:
        yield scrapy.Request(self.start_url, meta={"playwright": True}, callback=self.parse)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        # the links exist only in the rendered DOM
        for href in response.css("#links a::attr(href)").getall():
            yield response.follow(
                href,
                callback=self.parse_page,
                meta={"playwright": True, "playwright_page_methods": page_methods()},
            )

    def parse_page(self, response: Response) -> Iterator[dict[str, Any]]:
        yield {
            "url": response.url,
            "name": response.css("#name::text").get(),
            "late": response.css("#late::text").get(),
            "secret": response.css("#secret::text").get(),
        }
