"""A site that attacks whoever looks at what was crawled from it: its titles, text and
URLs carry script payloads. Served on loopback for the dashboard's XSS test, with a
spider that copies them into items as they are.

``/`` links to a page whose URL carries a payload and to ``/hold``, which answers only
when the site closes (at most HOLD_SECONDS), so that the node stays alive, showing its
latest items, while the browser looks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import scrapy
from scrapy.http import HtmlResponse, Response

from tests.support.loopback import LoopbackSite

__all__ = ["PAYLOADS", "HostileSite", "HostileSpider"]

#: What the pages carry; each must show on the dashboard as this very text.
PAYLOADS = {
    "title": "<script>window.__xss = 'title'</script>",
    "note": "<img src=x onerror=\"window.__xss='note'\">",
    "link": "javascript:window.__xss='link'",
    "path": '/x"><svg onload=window.__xss=1>',
}
HOLD_SECONDS = 60.0


def _page(title: str, note: str, links: list[str]) -> bytes:
    def esc(s: str) -> str:
        return (
            s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
        )

    anchors = "".join(f'<a href="{esc(href)}">next</a>' for href in links)
    return (
        f"<html><head><title>{esc(title)}</title></head><body>"
        f'<p class="note">{esc(note)}</p><a class="link" href="{esc(PAYLOADS["link"])}">x</a>'
        f"{anchors}</body></html>"
    ).encode()


class HostileSite(LoopbackSite):
    """The site: ``with HostileSite() as site: site.url``."""

    def __init__(self) -> None:
        super().__init__(self._page)

    def _page(self, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        if path == "/hold":
            self.closing.wait(HOLD_SECONDS)
            return 200, _page("held", "held", [])
        if path == "/":
            return 200, _page(PAYLOADS["title"], PAYLOADS["note"], [PAYLOADS["path"], "/hold"])
        return 200, _page(PAYLOADS["title"], PAYLOADS["note"], [])


class HostileSpider(scrapy.Spider):
    """Every page's title, note and link into an item, as they are; follows links."""

    name = "hostile"

    def __init__(self, start_urls: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start_urls]

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        if not isinstance(response, HtmlResponse):
            return
        yield {
            "url": response.url,
            "title": response.css("title::text").get(),
            "note": response.css("p.note::text").get(),
            "link": response.css("a.link::attr(href)").get(),
        }
        for href in response.css("a:not(.link)::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
