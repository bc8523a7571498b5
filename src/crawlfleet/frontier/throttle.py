"""What a node tells the cluster about a site's health: the ``SiteThrottle`` downloader
middleware (enabled by the add-on) watches responses and reports, through the
crawlfleet scheduler, to the job's ``throttle`` hash in Redis, which the lease script
reads for every node:

- a response whose status is in ``CRAWLFLEET_BACKOFF_STATUSES`` (429, 503) backs the
  site off: its interval between requests doubles, for every node, from
  ``CRAWLFLEET_BACKOFF_START_SECONDS`` up to ``CRAWLFLEET_BACKOFF_MAX_SECONDS``, never
  below the response's ``Retry-After``; it then halves every
  ``CRAWLFLEET_BACKOFF_HALF_LIFE_SECONDS`` without new reports (gradual recovery);
- a site whose download latency climbs (a moving average above
  ``CRAWLFLEET_BACKOFF_LATENCY_FACTOR`` times its baseline, the lowest average seen,
  and by at least ``LATENCY_MARGIN_SECONDS``) is backed off the same way, starting at
  its average latency (about one request at a time for the whole cluster). Not while
  this node's own event loop lags (``LAGGING_LOOP_MS``): its latencies then measure
  the node, not the site;
- with ``ROBOTSTXT_OBEY``, a robots.txt ``Crawl-delay`` for this crawler's user agent
  becomes the site's minimum interval (when it is stricter than the configured limit).
  Until some node has read a site's robots.txt, the site gives the whole cluster one
  request per ``ROBOTS_PROBE_SECONDS`` (the node that gets it reads robots.txt first),
  so no burst reaches a site before its Crawl-delay is known.

It sits above Scrapy's RetryMiddleware (550), so it sees a 429 before it is retried.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections import OrderedDict
from typing import Any

from protego import Protego
from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.http import Response
from scrapy.utils.httpobj import urlparse_cached

from crawlfleet.frontier.limits import SPACING
from crawlfleet.frontier.scheduler import ROBOTS_PROBE_MS, Scheduler
from crawlfleet.settings.config import BackoffConfig

__all__ = ["ROBOTS_PROBE_SECONDS", "SiteThrottle", "retry_after_ms"]

logger = logging.getLogger(__name__)

#: Weight of a new latency in a site's moving average.
LATENCY_ALPHA = 0.2
#: Latency must climb at least this much above the baseline to count.
LATENCY_MARGIN_SECONDS = 0.5
#: While this node's event loop lagged more than this in the last feedback interval,
#: its latencies do not count against sites.
LAGGING_LOOP_MS = 100.0
#: Responses of a site before its latency is judged at all.
LATENCY_WARMUP = 10
#: A site is reported slow at most once per this many seconds by one node.
REPORT_EVERY_SECONDS = 1.0
#: Sites whose latency is tracked (least recently seen ones are forgotten).
MAX_SITES = 10_000
#: While no node has read a site's robots.txt: one request per this long, cluster-wide.
ROBOTS_PROBE_SECONDS = ROBOTS_PROBE_MS / 1000
#: The longest Retry-After honoured (a server asking for more gets this).
MAX_RETRY_AFTER_SECONDS = 3600


def retry_after_ms(value: bytes | str | None, now: float | None = None) -> int:
    """A ``Retry-After`` header (seconds, or an HTTP date) in ms; 0 when absent or
    unreadable."""
    if not value:
        return 0
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    text = text.strip()
    if text.isdigit():
        seconds = float(text)
    else:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return 0
        seconds = when.timestamp() - (time.time() if now is None else now)
    return int(max(0.0, min(seconds, MAX_RETRY_AFTER_SECONDS)) * 1000)


class _Latency:
    __slots__ = ("average", "baseline", "count", "reported")

    def __init__(self) -> None:
        self.average = 0.0
        self.baseline = float("inf")
        self.count = 0
        self.reported = 0.0


class SiteThrottle:
    """A downloader middleware: back-off and robots.txt reports for the whole cluster."""

    def __init__(self, crawler: Crawler, backoff: BackoffConfig, *, obey_robots: bool) -> None:
        self.crawler = crawler
        self.backoff = backoff
        self.obey_robots = obey_robots
        settings = crawler.settings
        self.user_agent = str(
            settings.get("ROBOTSTXT_USER_AGENT") or settings.get("USER_AGENT") or "*"
        )
        self._sites: OrderedDict[str, _Latency] = OrderedDict()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SiteThrottle:
        return cls(
            crawler,
            BackoffConfig.from_settings(crawler.settings),
            obey_robots=crawler.settings.getbool("ROBOTSTXT_OBEY"),
        )

    def _scheduler(self) -> Scheduler | None:
        scheduler = getattr(self.crawler, "crawlfleet_scheduler", None)
        return scheduler if isinstance(scheduler, Scheduler) else None

    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Response:
        scheduler = self._scheduler()
        if scheduler is None:
            return response
        if self._is_robots(request):
            self._robots(scheduler, request, response)
            return response
        site = scheduler.site_of(request)
        if response.status in self.backoff.statuses:
            floor = retry_after_ms(response.headers.get(b"Retry-After"))
            scheduler.report_slow(site, f"it answered {response.status}", floor)
        latency = request.meta.get("download_latency")
        if self.backoff.latency_factor and isinstance(latency, (int, float)):
            self._latency(scheduler, site, float(latency))
        return response

    def process_exception(
        self, request: Request, exception: Exception, spider: Spider | None = None
    ) -> None:
        scheduler = self._scheduler()
        if scheduler is not None and self._is_robots(request):
            # robots.txt unreachable: Scrapy then allows everything; no Crawl-delay
            scheduler.report_robots(self._robots_site(scheduler, request), 0)

    def _is_robots(self, request: Request) -> bool:
        """A robots.txt request of Scrapy's RobotsTxtMiddleware (also once redirected,
        e.g. from http to https or to another host)."""
        if not (self.obey_robots and request.meta.get("dont_obey_robotstxt")):
            return False
        return urlparse_cached(self._first_request(request)).path == "/robots.txt"

    @staticmethod
    def _first_request(request: Request) -> Request:
        """*request* as first sent, before any redirect."""
        redirects = request.meta.get("redirect_urls")
        return request.replace(url=redirects[0]) if redirects else request

    def _robots_site(self, scheduler: Scheduler, request: Request) -> str:
        """The site whose robots.txt *request* fetched: the one first asked."""
        return scheduler.sites.site(self._first_request(request))

    def _robots(self, scheduler: Scheduler, request: Request, response: Response) -> None:
        """Report the Crawl-delay (0 when none, or robots.txt is missing or unreadable:
        the site is then known to have none)."""
        delay: Any = None
        if response.status == 200:
            try:
                parser = Protego.parse(response.body.decode("utf-8", errors="replace"))
                delay = parser.crawl_delay(self.user_agent)
            except Exception as exc:
                logger.debug("robots.txt of %s not readable: %s", request.url, exc)
        ms = int(delay * 1000 * SPACING) if isinstance(delay, (int, float)) and delay > 0 else 0
        scheduler.report_robots(self._robots_site(scheduler, request), ms)

    def _latency(self, scheduler: Scheduler, site: str, latency: float) -> None:
        entry = self._sites.get(site)
        if entry is None:
            entry = self._sites[site] = _Latency()
            if len(self._sites) > MAX_SITES:
                self._sites.popitem(last=False)
        else:
            self._sites.move_to_end(site)
        entry.count += 1
        if entry.count == 1:
            entry.average = latency
        else:
            entry.average += LATENCY_ALPHA * (latency - entry.average)
        if entry.count < LATENCY_WARMUP:
            return
        entry.baseline = min(entry.baseline, entry.average)
        climbed = entry.average - entry.baseline
        now = time.monotonic()
        if (
            entry.average > entry.baseline * self.backoff.latency_factor
            and climbed >= LATENCY_MARGIN_SECONDS
            and now - entry.reported >= REPORT_EVERY_SECONDS
            and scheduler.loop_lag_ms <= LAGGING_LOOP_MS
        ):
            entry.reported = now
            scheduler.report_slow(
                site,
                f"latency {entry.average * 1000:.0f} ms, baseline {entry.baseline * 1000:.0f} ms",
                first_ms=int(entry.average * 1000),
            )
