"""A loopback site where some pages fail, and a spider for it, for the error registry's
tests: ``/`` links to ``/ok``, ``/flaky`` (503 until ``site.flaky_fixed`` is set),
``/missing`` (404) and ``/boom`` (a page the spider's callback fails on)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import scrapy
from scrapy.http import Response

__all__ = ["FailingSite", "FailingSpider"]

LINKS = ("/ok", "/flaky", "/missing", "/boom")


class FailingSite:
    """``with FailingSite() as site: site.url``; ``site.hits`` counts requests by path."""

    def __init__(self) -> None:
        self.flaky_fixed = threading.Event()
        self.hits: dict[str, int] = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.hits[self.path] = outer.hits.get(self.path, 0) + 1
                status = 200
                if self.path == "/missing":
                    status = 404
                elif self.path == "/flaky" and not outer.flaky_fixed.is_set():
                    status = 503
                links = "".join(f'<a href="{p}">{p}</a>' for p in LINKS) if self.path == "/" else ""
                body = f"<html><title>{self.path}</title><body>{links}</body></html>".encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FailingSite:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


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
