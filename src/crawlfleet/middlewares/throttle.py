"""What a node tells the cluster about a site's health: the ``SiteThrottle`` downloader
middleware (enabled by the add-on) watches responses and reports, through the
crawlfleet scheduler, to the job's ``throttle`` hash in Redis, which the lease script
reads for every node:

- a response whose status is in ``CRAWLFLEET_BACKOFF_STATUSES`` (429, 503) backs the
  site off: its interval between requests doubles, for every node, from
  ``CRAWLFLEET_BACKOFF_START_SECONDS`` up to ``CRAWLFLEET_BACKOFF_MAX_SECONDS``, never
  below the response's ``Retry-After``; it then halves every
  ``CRAWLFLEET_BACKOFF_HALF_LIFE_SECONDS`` without new reports (gradual recovery);
- a site whose latency climbs is backed off the same way, starting at that latency
  (about one request at a time for the whole cluster). The site must be slow, not the
  node: even the fastest of its last ``LATENCY_WINDOW`` responses must be above
  ``CRAWLFLEET_BACKOFF_LATENCY_FACTOR`` times its baseline (the lowest such fastest
  seen) and by at least ``LATENCY_MARGIN_SECONDS`` (a node starved of CPU still gets
  some answers fast; a slow server answers none fast); and not while this node's
  event loop lags (``LAGGING_LOOP_MS``) or the machine's CPU is saturated
  (``BUSY_MACHINE_PERCENT``): its latencies then measure the node. Once a response is
  fast again, the node reports the site recovered and a back-off caused by latency
  alone ends for every node at once (logged; 429/503 back-offs decay as usual);
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
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

import psutil
from protego import Protego
from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.http import Response

from crawlfleet.frontier.config import BackoffConfig, rate_limit_margin
from crawlfleet.frontier.limits import DEFAULT_MARGIN
from crawlfleet.middlewares.common import first_request, is_robots
from crawlfleet.node.scheduler import ROBOTS_PROBE_MS
from crawlfleet.parts import NodeHandle, node_of

__all__ = ["ROBOTS_PROBE_SECONDS", "SiteThrottle", "retry_after_ms"]

logger = logging.getLogger(__name__)

#: A site is judged on the fastest of its last this many responses.
LATENCY_WINDOW = 8
#: Latency must climb at least this much above the baseline to count.
LATENCY_MARGIN_SECONDS = 0.5
#: While this node's event loop lagged more than this in the last feedback interval,
#: its latencies do not count against sites.
LAGGING_LOOP_MS = 100.0
#: While the machine's CPU is busier than this (%), latencies do not count either.
BUSY_MACHINE_PERCENT = 90.0
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
    __slots__ = ("baseline", "recent", "reported", "slow")

    def __init__(self) -> None:
        self.recent: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self.baseline = float("inf")
        self.reported = 0.0
        self.slow = False  # this node reported the site slow, not recovered since


class SiteThrottle:
    """A downloader middleware: back-off and robots.txt reports for the whole cluster."""

    def __init__(
        self,
        crawler: Crawler,
        backoff: BackoffConfig,
        *,
        obey_robots: bool,
        margin: float = DEFAULT_MARGIN,
    ) -> None:
        self.crawler = crawler
        self.backoff = backoff
        self.obey_robots = obey_robots
        #: a robots.txt Crawl-delay is widened like a rate limit (CRAWLFLEET_RATE_LIMIT_MARGIN)
        self.margin = margin
        settings = crawler.settings
        self.user_agent = str(
            settings.get("ROBOTSTXT_USER_AGENT") or settings.get("USER_AGENT") or "*"
        )
        self._sites: OrderedDict[str, _Latency] = OrderedDict()
        #: the machine's CPU use (%) since the last call (injectable for tests)
        self.machine_cpu: Callable[[], float] = lambda: float(psutil.cpu_percent(interval=None))

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SiteThrottle:
        return cls(
            crawler,
            BackoffConfig.from_settings(crawler.settings),
            obey_robots=crawler.settings.getbool("ROBOTSTXT_OBEY"),
            margin=rate_limit_margin(crawler.settings),
        )

    def _scheduler(self) -> NodeHandle | None:
        return node_of(self.crawler)

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
        return self.obey_robots and is_robots(request)

    def _robots_site(self, scheduler: NodeHandle, request: Request) -> str:
        """The site whose robots.txt *request* fetched: the one first asked (keyed by the
        node: a robots.txt request is never leased)."""
        return scheduler.site_of(first_request(request))

    def _robots(self, scheduler: NodeHandle, request: Request, response: Response) -> None:
        """Report the Crawl-delay (0 when none, or robots.txt is missing or unreadable:
        the site is then known to have none)."""
        delay: Any = None
        if response.status == 200:
            try:
                parser = Protego.parse(response.body.decode("utf-8", errors="replace"))
                delay = parser.crawl_delay(self.user_agent)
            except Exception as exc:
                logger.debug("robots.txt of %s not readable: %s", request.url, exc)
        spaced = delay * 1000 * (1 + self.margin) if isinstance(delay, (int, float)) else 0
        ms = int(spaced) if spaced > 0 else 0
        if ms:
            logger.info(
                "robots.txt of %s asks for a Crawl-delay of %gs",
                self._robots_site(scheduler, request),
                delay,
            )
        scheduler.report_robots(self._robots_site(scheduler, request), ms)

    def _latency(self, scheduler: NodeHandle, site: str, latency: float) -> None:
        entry = self._sites.get(site)
        if entry is None:
            entry = self._sites[site] = _Latency()
            if len(self._sites) > MAX_SITES:
                self._sites.popitem(last=False)
        else:
            self._sites.move_to_end(site)
        entry.recent.append(latency)
        if len(entry.recent) < LATENCY_WINDOW:
            return
        fastest = min(entry.recent)
        entry.baseline = min(entry.baseline, fastest)
        slow = (
            fastest > entry.baseline * self.backoff.latency_factor
            and fastest - entry.baseline >= LATENCY_MARGIN_SECONDS
        )
        if slow == entry.slow:
            return
        now = time.monotonic()
        if not slow:  # a fast answer clears the site, however busy this node is
            entry.slow = False
            scheduler.report_recovered(
                site,
                f"latency {fastest * 1000:.0f} ms, baseline {entry.baseline * 1000:.0f} ms",
            )
        elif now - entry.reported >= REPORT_EVERY_SECONDS and self.judging(scheduler):
            entry.slow, entry.reported = True, now
            scheduler.report_slow(
                site,
                f"its fastest of {LATENCY_WINDOW} responses took {fastest * 1000:.0f} ms, "
                f"baseline {entry.baseline * 1000:.0f} ms",
                first_ms=int(fastest * 1000),
                latency=True,
            )

    def judging(self, scheduler: NodeHandle) -> bool:
        """Whether this node's latencies say something about sites now: not while its
        event loop lags or the machine's CPU is saturated."""
        if scheduler.loop_lag_ms > LAGGING_LOOP_MS:
            return False
        return self.machine_cpu() < BUSY_MACHINE_PERCENT
