"""A loopback site that follows its visitors with a cookie, and a spider for it, for the
sessions test: ``/`` sets ``sid`` (a new number for a visitor without one) and links to
``/a1`` .. ``/a6`` and ``/gate``; ``/gate`` refuses its first visitor (403: a ban)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

import scrapy
from scrapy.http import Response

from tests.support.loopback import LoopbackSite

__all__ = ["SessionSite", "SessionSpider"]

LINKS = [f"/a{i}" for i in range(1, 7)] + ["/gate"]


class SessionSite(LoopbackSite):
    """``seen``: (path, its sid cookie or "", its User-Agent), in arrival order."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []
        self._sids = itertools.count(1)
        self._gate_refused = False
        self._lock = threading.Lock()
        super().__init__(self._page)

    def _page(self, path: str, headers: dict[str, str]) -> tuple[Any, ...]:
        cookie = headers.get("Cookie", "")
        sid = cookie.split("sid=", 1)[1].split(";", 1)[0] if "sid=" in cookie else ""
        with self._lock:
            self.seen.append((path, sid, headers.get("User-Agent", "")))
            if path == "/gate" and not self._gate_refused:
                self._gate_refused = True
                return 403, b"<html><title>Access denied</title></html>"
            extra = {} if sid else {"Set-Cookie": f"sid={next(self._sids)}; Path=/"}
        links = "".join(f'<a href="{p}">{p}</a>' for p in LINKS) if path == "/" else ""
        return 200, f"<html><body>{links}</body></html>".encode(), extra


class SessionSpider(scrapy.Spider):
    """Visits ``/``, then (once its cookie is set) every link, then ``/`` again from the
    gate (so that the new session's cookie is seen too)."""

    name = "sessions"

    def __init__(self, start_urls: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start_urls]

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, self.parse_page)

    def parse_page(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url}
        if response.url.endswith("/gate"):
            yield response.follow("/a1?again", self.parse_page)
