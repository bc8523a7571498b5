"""A small HTTP site on 127.0.0.1 for tests that need pages of their own: a function
maps each GET (path, request headers) to (status, HTML body); the site runs in a thread.

    with LoopbackSite(lambda path, headers: (200, b"<html>...</html>")) as site:
        site.url  # http://127.0.0.1:PORT/

``site.closing`` is set when the site closes (a handler that holds a request waits on
it); ``site.hits`` counts requests by path, ``site.times`` lists their arrival times
by path (``time.monotonic()``); ``site.headers`` lists (path, headers) of every request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["LoopbackSite"]


class LoopbackSite:
    def __init__(self, page: Callable[[str, dict[str, str]], tuple[Any, ...]]) -> None:
        """*page(path, headers)* answers ``(status, body)`` or ``(status, body,
        {header: value})``."""
        self.closing = threading.Event()
        self.hits: dict[str, int] = {}
        self.times: dict[str, list[float]] = {}
        self.headers: list[tuple[str, dict[str, str]]] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.times.setdefault(self.path, []).append(time.monotonic())
                site.hits[self.path] = site.hits.get(self.path, 0) + 1
                headers = dict(self.headers.items())
                site.headers.append((self.path, headers))
                status, body, *more = page(self.path, headers)
                self.send_response(status)
                for name, value in (more[0] if more else {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # a request still held when the site closes is cut: not an error worth printing
        self.server.handle_error = lambda *args: None  # type: ignore[method-assign]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LoopbackSite:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()
