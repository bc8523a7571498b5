"""Dynamic feedback: each node adapts how many requests it runs at once, and so how
much work it leases, to what it measures about itself.

Every ``CRAWLFLEET_FEEDBACK_INTERVAL_SECONDS`` the ``Feedback`` extension looks at the
interval just past and decides (AIMD, additive increase / multiplicative decrease):

- **overloaded** when any of these holds: the event loop lagged more than
  ``CRAWLFLEET_FEEDBACK_LOOP_LAG_MS`` (the process cannot keep up with its work); the
  mean download latency rose above ``CRAWLFLEET_FEEDBACK_LATENCY_FACTOR`` times its
  baseline (the lowest interval mean of the last ``BASELINE_INTERVALS`` intervals) and
  by at least ``LATENCY_MARGIN_SECONDS``; more than ``CRAWLFLEET_FEEDBACK_ERROR_RATIO``
  of the outcomes were errors or ban-like answers (download errors, 429, 503, 403);
  the process used more than ``CRAWLFLEET_FEEDBACK_CPU_PERCENT`` of a core while its
  loop lagged at least a tenth of the lag limit; or its memory is above
  ``CRAWLFLEET_FEEDBACK_MAX_RSS_MB``. The limit is then multiplied by ``DECREASE``
  (never below ``CRAWLFLEET_FEEDBACK_MIN_CONCURRENCY``);
- **calm** otherwise. After ``CALM_INTERVALS`` calm intervals in a row (hysteresis: no
  flapping after a decrease), and only while the node actually used most of its limit,
  the limit grows by one, up to the node's ceiling (``CONCURRENT_REQUESTS`` or the
  operator's ``crawlfleet control concurrency``).

The scheduler runs ``min(ceiling, limit)`` requests at once and keeps a prefetch buffer
of the same size, so a node never holds more leased work than it can start soon: a
slow or overloaded node takes less from the shared frontier and the others take the
rest. While the node waits for its item store (:mod:`crawlfleet.node.backlog`) the
limit stays as it is: its pages wait for the store, not for the node, so an interval
then says nothing of the node's capacity. The decision, its reason and the figures are
published in the node status (``feedback``) and counted in stats
(``crawlfleet/feedback/*``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.http import Response

from crawlfleet.node.scheduler import Scheduler
from crawlfleet.node.telemetry import LoopLagProbe
from crawlfleet.outage import Failures
from crawlfleet.parts import parts_of
from crawlfleet.settings.access import get_bool, get_float, get_int

__all__ = ["Controller", "Feedback", "Limits", "Sample"]

logger = logging.getLogger(__name__)

#: Multiplicative decrease applied to the limit on overload.
DECREASE = 0.75
#: Calm intervals in a row needed before the limit grows again.
CALM_INTERVALS = 3
#: The limit grows only when the node used at least this share of it on average.
BUSY_SHARE = 0.75
#: Intervals over which the lowest mean latency is the baseline.
BASELINE_INTERVALS = 300
#: Latency must also rise by at least this much above the baseline to count.
LATENCY_MARGIN_SECONDS = 0.05
#: Fewer outcomes than this in an interval say nothing about the error ratio.
MIN_OUTCOMES = 5
#: HTTP answers that mean "too much" (ban-like) rather than "no such page".
BAN_STATUSES = frozenset((403, 429, 503))


@dataclass(frozen=True)
class Limits:
    """Thresholds of the controller (see the module docstring)."""

    minimum: int = 1
    latency_factor: float = 3.0
    error_ratio: float = 0.25
    cpu_percent: float = 95.0
    loop_lag_ms: float = 250.0
    max_rss_mb: float = 0.0


@dataclass(frozen=True)
class Sample:
    """What one node measured over one interval."""

    latency: float | None  #: mean download latency (s); None without responses
    outcomes: int  #: responses plus download errors
    errors: int  #: download errors plus ban-like answers
    cpu_percent: float
    loop_lag_ms: float  #: worst lateness of the loop probe
    rss_mb: float
    utilisation: float  #: mean requests in flight / the limit in force


class Controller:
    """The AIMD rule, free of Scrapy: feed it one :class:`Sample` per interval."""

    def __init__(self, ceiling: int, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.limit = max(self.limits.minimum, ceiling)
        self.calm = 0
        self.reason = "start"
        self._latencies: deque[float] = deque(maxlen=BASELINE_INTERVALS)

    def baseline(self) -> float | None:
        return min(self._latencies) if self._latencies else None

    def overload(self, s: Sample) -> str | None:
        """Why the node counts as overloaded in *s*, or None."""
        lim = self.limits
        if s.loop_lag_ms > lim.loop_lag_ms:
            return f"event loop lagged {s.loop_lag_ms:.0f} ms"
        base = self.baseline()
        if (
            s.latency is not None
            and base is not None
            and s.latency > base * lim.latency_factor
            and s.latency - base >= LATENCY_MARGIN_SECONDS
        ):
            return f"latency {s.latency * 1000:.0f} ms, baseline {base * 1000:.0f} ms"
        if s.outcomes >= MIN_OUTCOMES and s.errors / s.outcomes > lim.error_ratio:
            return f"{s.errors} of {s.outcomes} outcomes were errors or bans"
        if s.cpu_percent > lim.cpu_percent and s.loop_lag_ms > lim.loop_lag_ms / 10:
            return f"CPU {s.cpu_percent:.0f}% with the loop lagging {s.loop_lag_ms:.0f} ms"
        if lim.max_rss_mb and s.rss_mb > lim.max_rss_mb:
            return f"memory {s.rss_mb:.0f} MB above {lim.max_rss_mb:.0f} MB"
        return None

    def step(self, s: Sample, ceiling: int) -> int:
        """Apply one interval's sample; returns the new limit (within the ceiling)."""
        why = self.overload(s)
        if why is not None:
            self.calm = 0
            self.limit = max(self.limits.minimum, min(ceiling, math.floor(self.limit * DECREASE)))
            self.reason = why
        else:
            self.calm += 1
            if self.calm >= CALM_INTERVALS and s.utilisation >= BUSY_SHARE:
                self.limit += 1
                self.calm = 0
                self.reason = "calm and busy"
            self.limit = max(self.limits.minimum, min(ceiling, self.limit))
        if s.latency is not None:
            self._latencies.append(s.latency)
        return self.limit


class Feedback:
    """A Scrapy extension: runs the :class:`Controller` and applies its limit through the
    crawlfleet scheduler (it does nothing under another scheduler)."""

    def __init__(
        self,
        crawler: Crawler,
        *,
        interval: float,
        limits: Limits,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.crawler = crawler
        self.interval = interval
        self.limits = limits
        self.clock = clock
        self.stats = crawler.stats
        self.process = psutil.Process()
        self.controller: Controller | None = None
        self.scheduler: Scheduler | None = None
        self.probe = LoopLagProbe(interval / 4, self._lag)
        self._task: asyncio.Task[None] | None = None
        self._last: Sample | None = None
        # figures of the current interval
        self._latency_sum, self._latency_n, self._bans = 0.0, 0, 0
        self._lag_max, self._busy_sum, self._busy_n = 0.0, 0.0, 0
        self._errors0 = 0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Feedback:
        s = crawler.settings
        if not get_bool(s, "CRAWLFLEET_FEEDBACK"):
            raise NotConfigured  # CRAWLFLEET_FEEDBACK is off (no message: Scrapy warns of one)
        limits = Limits(
            minimum=get_int(s, "CRAWLFLEET_FEEDBACK_MIN_CONCURRENCY", minimum=1),
            latency_factor=get_float(s, "CRAWLFLEET_FEEDBACK_LATENCY_FACTOR", minimum=1),
            error_ratio=get_float(s, "CRAWLFLEET_FEEDBACK_ERROR_RATIO", minimum=0),
            cpu_percent=get_float(s, "CRAWLFLEET_FEEDBACK_CPU_PERCENT", minimum=0),
            loop_lag_ms=get_float(s, "CRAWLFLEET_FEEDBACK_LOOP_LAG_MS", minimum=1),
            max_rss_mb=get_float(s, "CRAWLFLEET_FEEDBACK_MAX_RSS_MB", minimum=0),
        )
        ext = cls(
            crawler,
            interval=get_float(s, "CRAWLFLEET_FEEDBACK_INTERVAL_SECONDS", minimum=0.1),
            limits=limits,
        )
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(ext.response_received, signal=signals.response_received)
        parts_of(crawler).status_providers.append(ext.status)
        return ext

    # -- signals ------------------------------------------------------------------------
    def spider_opened(self, spider: Spider) -> None:
        scheduler = Scheduler.of(self.crawler)
        if scheduler is None:
            logger.info("Feedback needs the crawlfleet scheduler: not running")
            return
        self.scheduler = scheduler
        self.controller = Controller(scheduler.steering.ceiling, self.limits)
        self.process.cpu_percent(None)
        self._reset_interval()
        loop = asyncio.get_running_loop()
        self.probe.start(loop)
        self._task = loop.create_task(self._run())

    def spider_closed(self, spider: Spider) -> None:
        self.probe.stop()
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def response_received(self, response: Response, request: Request, spider: Spider) -> None:
        latency = request.meta.get("download_latency")
        if isinstance(latency, (int, float)):
            self._latency_sum += latency
            self._latency_n += 1
        if response.status in BAN_STATUSES:
            self._bans += 1

    # -- the loop ------------------------------------------------------------------------
    def _lag(self, seconds: float) -> None:
        self._lag_max = max(self._lag_max, seconds * 1000)
        scheduler = self.scheduler
        if scheduler is not None:
            self._busy_sum += min(1.0, scheduler.in_progress / scheduler.steering.concurrency)
            self._busy_n += 1

    def _reset_interval(self) -> None:
        self._latency_sum, self._latency_n, self._bans = 0.0, 0, 0
        self._lag_max, self._busy_sum, self._busy_n = 0.0, 0.0, 0
        self._errors0 = self._stat("downloader/exception_count")

    async def _run(self) -> None:
        failures = Failures("feedback step", logger)
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.tick()
            except Exception:
                failures.failed()
            else:
                failures.succeeded()

    def tick(self) -> None:
        """Close the current interval: sample, step the controller, apply the limit."""
        controller, scheduler = self.controller, self.scheduler
        if controller is None or scheduler is None:
            return
        if scheduler.sync.backlog.waiting_for_store:
            self._reset_interval()  # busy with pages that wait for the store: no sample
            return
        errors = self._stat("downloader/exception_count") - self._errors0
        sample = Sample(
            latency=self._latency_sum / self._latency_n if self._latency_n else None,
            outcomes=self._latency_n + errors,
            errors=errors + self._bans,
            cpu_percent=self.process.cpu_percent(None),
            loop_lag_ms=self._lag_max,
            rss_mb=self.process.memory_info().rss / 2**20,
            utilisation=self._busy_sum / self._busy_n if self._busy_n else 0.0,
        )
        self._reset_interval()
        scheduler.loop_lag_ms = sample.loop_lag_ms
        before = controller.limit
        after = controller.step(sample, scheduler.steering.ceiling)
        self._last = sample
        if after != before:
            direction = "down" if after < before else "up"
            if self.stats is not None:
                self.stats.inc_value(f"crawlfleet/feedback/{direction}")
            logger.log(
                logging.INFO if after < before else logging.DEBUG,
                "Feedback: concurrency %d -> %d (%s)",
                before,
                after,
                controller.reason,
            )
        scheduler.set_feedback_limit(after)

    def status(self) -> dict[str, Any]:
        controller = self.controller
        if controller is None:
            return {}
        last = self._last
        base = controller.baseline()
        return {
            "feedback": {
                "limit": controller.limit,
                "reason": controller.reason,
                "baseline_latency_ms": None if base is None else round(base * 1000, 1),
                "utilisation": None if last is None else round(last.utilisation, 2),
            }
        }

    def _stat(self, key: str) -> int:
        return int(self.stats.get_value(key, 0) or 0) if self.stats is not None else 0
