"""Retries through the frontier: ``FrontierRetry`` (the add-on puts it in the place of
Scrapy's RetryMiddleware, 550) retries what Scrapy would retry (``RETRY_TIMES``,
``RETRY_HTTP_CODES``, ``RETRY_EXCEPTIONS``, ``dont_retry``, ``max_retry_times``), but a
retry is not sent again at once by the node that saw the failure: it goes back to the
shared frontier with a not-before time (``DELAY_META``), waits there without holding any
node, and is then leased like any request, by any node, within its site's budget.

The wait grows exponentially with the attempt: ``CRAWLFLEET_RETRY_BACKOFF`` seconds
for the first retry, twice that for the second and so on, up to
``CRAWLFLEET_RETRY_BACKOFF_MAX``, each spread by +-20 % so that the retries of one burst
of failures do not come back together; a longer ``Retry-After`` of the response (429,
503) is honoured up to that maximum. ``CRAWLFLEET_RETRY_BACKOFF = 0`` retries without
waiting (still through the frontier).

After the last attempt the failure goes on to the error registry
(:class:`~crawlfleet.middlewares.failures.FailureRegistry`, below this middleware).
"""

from __future__ import annotations

import random
from typing import Any

from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.downloadermiddlewares.retry import RetryMiddleware
from scrapy.http import Response

from crawlfleet.exceptions import ConfigError
from crawlfleet.meta import DELAY_META
from crawlfleet.middlewares.throttle import retry_after_ms

__all__ = ["JITTER", "FrontierRetry", "backoff_seconds", "check_backoff"]

#: Each wait is spread by this share up or down.
JITTER = 0.2


def backoff_seconds(
    attempt: int, base: float, cap: float, *, floor: float = 0.0, jitter: float = 0.0
) -> float:
    """The wait before retry number *attempt* (1 for the first): *base* doubled per
    attempt, at least *floor* (a Retry-After), at most *cap*; *jitter* in -1..1 spreads
    it by up to ``JITTER``."""
    if base <= 0 and floor <= 0:
        return 0.0
    grown = base * 2 ** min(max(attempt, 1) - 1, 30)
    return float(min(cap, max(floor, grown * (1 + JITTER * jitter))))


def check_backoff(base: float, cap: float) -> None:
    """ConfigError unless *base* >= 0 and *cap* >= *base*."""
    if base < 0:
        raise ConfigError(f"CRAWLFLEET_RETRY_BACKOFF must be >= 0 seconds, got {base:g}")
    if cap < base:
        raise ConfigError(
            f"CRAWLFLEET_RETRY_BACKOFF_MAX ({cap:g}) must be >= CRAWLFLEET_RETRY_BACKOFF ({base:g})"
        )


class FrontierRetry(RetryMiddleware):
    """See the module docstring."""

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self.base = settings.getfloat("CRAWLFLEET_RETRY_BACKOFF")
        self.cap = settings.getfloat("CRAWLFLEET_RETRY_BACKOFF_MAX")
        check_backoff(self.base, self.cap)
        self.random = random.Random()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierRetry:
        mw = cls(crawler.settings)
        mw.crawler = crawler
        return mw

    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Request | Response:
        out = super().process_response(request, response)
        if isinstance(out, Request):
            floor = retry_after_ms(response.headers.get(b"Retry-After")) / 1000
            self.delay(out, floor)
        return out

    def process_exception(
        self, request: Request, exception: Exception, spider: Spider | None = None
    ) -> Request | Response | None:
        out = super().process_exception(request, exception)
        if isinstance(out, Request):
            self.delay(out)
        return out

    def delay(self, retry: Request, floor: float = 0.0) -> None:
        """Give *retry* its wait in the frontier (by its ``retry_times``)."""
        attempt = int(retry.meta.get("retry_times", 1))
        wait = backoff_seconds(
            attempt, self.base, self.cap, floor=floor, jitter=self.random.uniform(-1, 1)
        )
        if wait > 0:
            retry.meta[DELAY_META] = wait
