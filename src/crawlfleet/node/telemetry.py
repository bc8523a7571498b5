"""Live figures of this node, published with every heartbeat (``<job>:nodeinfo``).

The ``Telemetry`` extension registers a node-status provider (in
``parts_of(crawler).status_providers``, :mod:`crawlfleet.parts`). Rates are computed from stats
deltas at each heartbeat over a sliding window of ``CRAWLFLEET_TELEMETRY_WINDOW_SECONDS``;
per request it only adds a download latency to a one-second bucket (O(1)). Published
keys (all JSON numbers, ``None`` where nothing was measured yet):

- ``pages_per_min``, ``items_per_min``: over the window;
- ``pages``, ``items``; ``errors``: ``{"spider_exceptions", "download_errors",
  "log_errors"}`` (a spider exception is also logged as an ERROR);
- ``responses``: HTTP status -> count;
- ``latency_ms``: mean download latency over the window;
- ``in_flight`` (requests the downloader is working on), ``concurrency``;
- ``cpu_percent`` (since the previous heartbeat; 100 = one core), ``rss_bytes``;
- ``loop_lag_max_ms``, ``loop_lag_mean_ms``: lateness of a periodic event-loop timer
  over the window (how long the reactor was blocked);
- ``latest_items``: the node's last ``CRAWLFLEET_TELEMETRY_LATEST_ITEMS`` items, newest
  first, each cut to its first fields and characters (``PREVIEW_FIELDS``,
  ``PREVIEW_CHARS``), for the dashboard's preview;
- ``window_seconds``, ``updated`` (wall-clock time of the figures).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import psutil
from itemadapter import ItemAdapter
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.http import Response

from crawlfleet.parts import parts_of
from crawlfleet.settings.access import get_float, get_int

__all__ = ["LoopLagProbe", "Telemetry", "Window", "preview"]

logger = logging.getLogger(__name__)

STATUS_PREFIX = "downloader/response_status_count/"
#: Samples kept at most, whatever the window and heartbeat (memory bound).
MAX_SAMPLES = 10_000
#: An item's preview: its first fields, each value cut to so many characters.
PREVIEW_FIELDS = 8
PREVIEW_CHARS = 200


def preview(item: Any) -> dict[str, Any]:
    """*item* cut down for a look: at most PREVIEW_FIELDS fields (bookkeeping fields
    such as ``_key`` left out, ``_type`` kept), numbers, booleans and None as they are,
    anything else as text of at most PREVIEW_CHARS characters."""
    out: dict[str, Any] = {}
    fields = [
        (k, v) for k, v in ItemAdapter(item).items() if k == "_type" or not str(k).startswith("_")
    ]
    for name, value in fields[:PREVIEW_FIELDS]:
        if value is None or isinstance(value, (bool, int, float)):
            out[str(name)[:64]] = value
        else:
            out[str(name)[:64]] = str(value)[:PREVIEW_CHARS]
    return out


class Window:
    """Values summarised over the last *seconds*, kept in one-second buckets: adding a
    value is O(1) and memory is bounded by the window length."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        # [bucket second, count, sum, max]
        self._buckets: deque[list[float]] = deque(maxlen=max(1, math.ceil(seconds)) + 1)

    def add(self, value: float, now: float) -> None:
        second = math.floor(now)
        last = self._buckets[-1] if self._buckets else None
        if last is not None and last[0] == second:
            last[1] += 1
            last[2] += value
            last[3] = max(last[3], value)
        else:
            self._buckets.append([second, 1, value, value])

    def summary(self, now: float) -> tuple[int, float | None, float | None]:
        """(count, mean, max) of the values added in the window ending at *now*;
        mean and max are ``None`` when there are none."""
        oldest = now - self.seconds
        while self._buckets and self._buckets[0][0] + 1 <= oldest:
            self._buckets.popleft()
        count = int(sum(b[1] for b in self._buckets))
        if not count:
            return 0, None, None
        return (
            count,
            sum(b[2] for b in self._buckets) / count,
            max(b[3] for b in self._buckets),
        )


class LoopLagProbe:
    """Measures how late an event loop runs its timers: every *interval* seconds a timer
    reports how late it fired (seconds) to *report*. Runs from ``start(loop)`` until
    ``stop()``."""

    def __init__(self, interval: float, report: Callable[[float], None]) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be > 0, got {interval}")
        self.interval = interval
        self.report = report
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.stop()
        self._loop = loop
        self._schedule()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None
        self._loop = None

    def _schedule(self) -> None:
        loop = self._loop
        if loop is None:
            return
        due = loop.time() + self.interval
        self._handle = loop.call_at(due, self._fire, due)

    def _fire(self, due: float) -> None:
        loop = self._loop
        if loop is None:
            return
        self.report(max(0.0, loop.time() - due))
        self._schedule()


class Telemetry:
    """A Scrapy extension: live figures of the node in its heartbeat status."""

    def __init__(
        self,
        stats: Any,
        *,
        window_seconds: float = 60.0,
        loop_lag_seconds: float = 0.5,
        concurrency: int = 16,
        in_flight: Callable[[], int | None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        process: psutil.Process | None = None,
        latest_items: int = 3,
    ) -> None:
        if window_seconds <= 0:
            raise ValueError(f"window_seconds must be > 0, got {window_seconds}")
        if loop_lag_seconds <= 0:
            raise ValueError(f"loop_lag_seconds must be > 0, got {loop_lag_seconds}")
        self.stats = stats
        self.window_seconds = window_seconds
        self.loop_lag_seconds = loop_lag_seconds
        self.concurrency = concurrency
        self.in_flight = in_flight
        self.clock = clock
        self.process = process or psutil.Process()
        self.process.cpu_percent(None)  # the first call only starts the measurement
        self.latency = Window(window_seconds)
        self.loop_lag = Window(window_seconds)
        self._latest: deque[Any] = deque(maxlen=max(0, latest_items))
        # (time, pages, items) at each call of status(), oldest first
        self._samples: deque[tuple[float, int, int]] = deque(maxlen=MAX_SAMPLES)
        self._samples.append((clock(), self._stat("response_received_count"), self._items()))
        self._probe = LoopLagProbe(loop_lag_seconds, self._lag)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Telemetry:
        settings = crawler.settings

        def in_flight() -> int | None:
            try:
                engine = crawler.engine
            except RuntimeError:  # Scrapy >= 2.14: not set before the crawl starts
                return None
            downloader = getattr(engine, "downloader", None)
            active = getattr(downloader, "active", None)
            return None if active is None else len(active)

        ext = cls(
            crawler.stats,
            window_seconds=get_float(settings, "CRAWLFLEET_TELEMETRY_WINDOW_SECONDS", minimum=1),
            loop_lag_seconds=get_float(
                settings, "CRAWLFLEET_TELEMETRY_LOOP_LAG_SECONDS", minimum=0, strict=True
            ),
            concurrency=settings.getint("CONCURRENT_REQUESTS"),
            in_flight=in_flight,
            latest_items=get_int(settings, "CRAWLFLEET_TELEMETRY_LATEST_ITEMS", minimum=0),
        )
        crawler.signals.connect(ext.response_received, signal=signals.response_received)
        if ext._latest.maxlen:
            crawler.signals.connect(ext.item_scraped, signal=signals.item_scraped)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        parts_of(crawler).status_providers.append(ext.status)
        return ext

    # -- signals ------------------------------------------------------------------------
    def response_received(self, response: Response, request: Request, spider: Spider) -> None:
        latency = request.meta.get("download_latency")
        if isinstance(latency, (int, float)):
            self.latency.add(float(latency), self.clock())

    def item_scraped(self, item: Any) -> None:
        self._latest.append(item)  # kept as is: cut down only when published

    def spider_opened(self, spider: Spider) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            logger.debug("No running asyncio loop: event-loop lag is not measured")
            return
        self.start_loop_probe(loop)

    def spider_closed(self, spider: Spider) -> None:
        self.stop_loop_probe()

    # -- event-loop lag ---------------------------------------------------------------
    def start_loop_probe(self, loop: asyncio.AbstractEventLoop) -> None:
        """Measure *loop*'s lag: a timer every ``loop_lag_seconds`` notes how late it
        fires. Runs until ``stop_loop_probe()``."""
        self._probe.start(loop)

    def stop_loop_probe(self) -> None:
        self._probe.stop()

    def _lag(self, seconds: float) -> None:
        self.loop_lag.add(seconds, self.clock())

    # -- the status provider ----------------------------------------------------------
    def status(self) -> dict[str, Any]:
        now = self.clock()
        pages, items = self._stat("response_received_count"), self._items()
        self._samples.append((now, pages, items))
        # keep one sample at or beyond the window's start, as the baseline
        while len(self._samples) > 2 and self._samples[1][0] <= now - self.window_seconds:
            self._samples.popleft()
        t0, pages0, items0 = self._samples[0]
        span = now - t0
        _n, latency, _max = self.latency.summary(now)
        _n, lag_mean, lag_max = self.loop_lag.summary(now)
        memory = self.process.memory_info()
        return {
            "window_seconds": self.window_seconds,
            "pages_per_min": _per_minute(pages - pages0, span),
            "items_per_min": _per_minute(items - items0, span),
            "pages": pages,
            "items": items,
            "errors": {
                "spider_exceptions": self._stat("spider_exceptions/count"),
                "download_errors": self._stat("downloader/exception_count"),
                "log_errors": self._stat("log_count/ERROR"),
            },
            "responses": self._responses(),
            "latency_ms": _ms(latency),
            "in_flight": self.in_flight(),
            "concurrency": self.concurrency,
            "cpu_percent": round(self.process.cpu_percent(None), 1),
            "rss_bytes": int(memory.rss),
            "loop_lag_max_ms": _ms(lag_max),
            "loop_lag_mean_ms": _ms(lag_mean),
            "latest_items": [preview(item) for item in reversed(self._latest)],
            "updated": time.time(),
        }

    # -- helpers ----------------------------------------------------------------------
    def _stat(self, key: str) -> int:
        value = self.stats.get_value(key, 0) if self.stats is not None else 0
        return int(value or 0)

    def _items(self) -> int:
        return self._stat("item_scraped_count")

    def _responses(self) -> dict[str, int]:
        if self.stats is None:
            return {}
        return {
            key[len(STATUS_PREFIX) :]: int(value)
            for key, value in self.stats.get_stats().items()
            if key.startswith(STATUS_PREFIX)
        }


def _per_minute(delta: int, seconds: float) -> float | None:
    if seconds <= 0:
        return None
    return round(delta * 60.0 / seconds, 1)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 1)
