"""Ban detection: the ``BanDetector`` downloader middleware (enabled by the add-on) marks
a response *banned* when the site refuses the crawler rather than the page:

- its status is in ``CRAWLFLEET_BAN_STATUSES`` (403 by default; 429 and 503 are the
  site's back-off signals, handled by the throttle and Scrapy's retries);
- it was redirected to a URL that matches one of ``CRAWLFLEET_BAN_URL_PATTERNS`` (a
  captcha, a login or a challenge page);
- its body (its first ``BODY_BYTES``) matches one of ``CRAWLFLEET_BAN_BODY_PATTERNS``
  (regular expressions; none by default: a spec names its site's).

A ban backs the site off for every node (as a 429 does: the cluster slows down on that
site), is counted (``crawlfleet/bans/...`` stats), and the request goes back to the
frontier to be tried again, by any node, under a new browser identity for that site
(``CRAWLFLEET_USER_AGENTS``) and through another proxy (``CRAWLFLEET_PROXY_ENABLED``:
the banned one is kept away from the site), after a wait that grows as a retry's does
(``CRAWLFLEET_RETRY_BACKOFF``), up to ``CRAWLFLEET_BAN_RETRIES`` times; then it is
recorded in the error registry with the reason ``ban`` and dropped.
"""

from __future__ import annotations

import logging
import random
import re
from typing import Any

from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response

from crawlfleet.exceptions import ConfigError
from crawlfleet.meta import BAN_META, DELAY_META, NEW_IDENTITY_META
from crawlfleet.middlewares.common import first_request, is_robots
from crawlfleet.middlewares.retry import backoff_seconds, check_backoff
from crawlfleet.parts import NodeParts, node_of, parts_of
from crawlfleet.settings.access import get_int

__all__ = ["BODY_BYTES", "BanDetector", "Banned"]

logger = logging.getLogger(__name__)

#: How much of a body the body patterns read.
BODY_BYTES = 65_536


#: Request meta of a redirect chain, left out when the first request is asked again.
REDIRECT_META = ("redirect_urls", "redirect_times", "redirect_ttl", "redirect_reasons")


def _as_first_asked(request: Request) -> Request:
    """*request* as first asked, before the redirects that led to a ban."""
    if not request.meta.get("redirect_urls"):
        return request
    first = first_request(request)
    for key in REDIRECT_META:
        first.meta.pop(key, None)
    return first


class Banned(IgnoreRequest):
    """A request the site kept refusing (its ban retries spent)."""


def _patterns(name: str, values: list[str]) -> list[re.Pattern[str]]:
    out = []
    for value in values:
        try:
            out.append(re.compile(value, re.IGNORECASE))
        except re.error as exc:
            raise ConfigError(f"{name}: {value!r} is not a regular expression ({exc})") from None
    return out


class BanDetector:
    """See the module docstring."""

    def __init__(
        self,
        crawler: Crawler | None,
        *,
        statuses: set[int],
        url_patterns: list[re.Pattern[str]],
        body_patterns: list[re.Pattern[str]],
        retries: int,
        backoff: tuple[float, float] = (0.0, 0.0),
    ) -> None:
        self.crawler = crawler
        self.backoff = backoff  # CRAWLFLEET_RETRY_BACKOFF, _MAX
        self.random = random.Random()
        self.statuses = statuses
        self.url_patterns = url_patterns
        self.body_patterns = body_patterns
        self.retries = retries
        self.stats = crawler.stats if crawler is not None else None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BanDetector:
        detector = cls._build(crawler)
        parts_of(crawler).bans = detector  # for ProxyRotation
        return detector

    @classmethod
    def _build(cls, crawler: Crawler) -> BanDetector:
        s = crawler.settings
        retries = get_int(s, "CRAWLFLEET_BAN_RETRIES", minimum=0)
        backoff = (
            s.getfloat("CRAWLFLEET_RETRY_BACKOFF"),
            s.getfloat("CRAWLFLEET_RETRY_BACKOFF_MAX"),
        )
        check_backoff(*backoff)
        return cls(
            crawler,
            statuses={int(c) for c in s.getlist("CRAWLFLEET_BAN_STATUSES")},
            url_patterns=_patterns(
                "CRAWLFLEET_BAN_URL_PATTERNS", s.getlist("CRAWLFLEET_BAN_URL_PATTERNS")
            ),
            body_patterns=_patterns(
                "CRAWLFLEET_BAN_BODY_PATTERNS", s.getlist("CRAWLFLEET_BAN_BODY_PATTERNS")
            ),
            retries=retries,
            backoff=backoff,
        )

    def why_banned(self, request: Request, response: Response) -> str | None:
        """Why *response* says the site refused the crawler, or None."""
        if response.status in self.statuses:
            return f"HTTP {response.status}"
        redirected = request.meta.get("redirect_urls")
        if redirected and response.url != redirected[0]:
            for pattern in self.url_patterns:
                if pattern.search(response.url):
                    return f"redirected to {response.url[:200]}"
        if self.body_patterns and response.body:
            head = response.body[:BODY_BYTES].decode("utf-8", errors="replace")
            for pattern in self.body_patterns:
                if pattern.search(head):
                    return f"page matches {pattern.pattern!r}"
        return None

    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Any:
        if is_robots(request):
            return response  # robots.txt's own answer is RobotsTxtMiddleware's business
        why = self.why_banned(request, response)
        if why is None:
            return response
        # a redirect to a captcha page: what was refused is the page first asked for
        request = _as_first_asked(request)
        scheduler = node_of(self.crawler)
        site = scheduler.site_of(request) if scheduler is not None else ""
        if scheduler is not None:
            scheduler.report_slow(site, f"it banned the crawler ({why})")
        self._inc("crawlfleet/bans/count")
        # without a crawler (a detector built by hand): no part to tell
        parts = parts_of(self.crawler) if self.crawler is not None else NodeParts()
        if parts.proxies is not None:  # that proxy is kept away from this site for a while
            parts.proxies.banned(request)
        bans = int(request.meta.get(BAN_META, 0)) + 1
        if bans <= self.retries:
            self._inc("crawlfleet/bans/retried")
            logger.info("Banned on %s (%s): trying %s again, new identity", site, why, request.url)
            retry = request.replace(dont_filter=True)
            retry.meta[BAN_META] = bans
            retry.meta[NEW_IDENTITY_META] = True
            wait = backoff_seconds(bans, *self.backoff, jitter=self.random.uniform(-1, 1))
            if wait > 0:
                retry.meta[DELAY_META] = wait
            retry.meta.pop("is_start_request", None)  # start requests pass the filter once
            return retry
        self._inc("crawlfleet/bans/gave_up")
        if parts.failures is not None:
            parts.failures.record(request, "ban", why, status=response.status)
        raise Banned(f"{request.url}: banned {bans} time(s), last: {why}")

    def _inc(self, key: str) -> None:
        if self.stats is not None:
            self.stats.inc_value(key)
