"""Request accounting for the test site: counts per URL and peak request rates.

Rates use an exact sliding window: for each host (and for the whole site) a deque keeps
the arrival times of the last second, so the highest number of requests in any window
``(t - 1 s, t]`` is updated in O(1) amortised time per request, with memory bounded by
the peak rate rather than by the number of requests. A busiest window always ends at
some request's arrival, so checking the window at each arrival finds the true maximum.

For windows of other lengths, each host's first :data:`ARRIVALS_KEPT` arrival times are
kept too (8 bytes each). With a ticker on (the server's ``stall_tick_seconds``), the
site also notes how late each tick fired: its own event loop's stalls, during which
arrivals are counted late and bunched together (:class:`LoopStalls`).
"""

from __future__ import annotations

import heapq
import time
from array import array
from collections import deque
from collections.abc import Callable
from typing import Any

from crawlfleet.testsite.model import ODD_FILES, Loc, SiteModel, host_address

__all__ = [
    "ARRIVALS_KEPT",
    "RATE_WINDOW_SECONDS",
    "STALLS_KEPT",
    "LoopStalls",
    "RateWindow",
    "RequestLog",
    "is_problem_path",
]

RATE_WINDOW_SECONDS = 1.0
#: Arrival times kept per host (the first ones): 0.8 MB a host at most.
ARRIVALS_KEPT = 100_000
#: Loop stalls kept (the largest ones), and the least a stall lasts to be kept (s).
STALLS_KEPT = 1000
STALL_KEPT_MIN = 0.001
_PROBLEM_PREFIXES = ("/status/", "/r/")
_PROBLEM_PATHS = frozenset(("/slow", *ODD_FILES))


def is_problem_path(path: str) -> bool:
    """Whether ``path`` (with query) is one of the site's problem resources: error
    statuses, the slow page, redirects and the non-HTML files."""
    return path in _PROBLEM_PATHS or path.startswith(_PROBLEM_PREFIXES)


class RateWindow:
    """The highest number of events seen in any window of ``width`` seconds, and, if
    *keep_window*, the first window that reached it (:attr:`peak_window`: each event's
    time and tag; copied at each new peak, so only where it is read).

    Times passed to :meth:`add` must not decrease (a monotonic clock).
    """

    __slots__ = ("_keep", "_times", "_width", "peak", "peak_window")

    def __init__(self, width: float = RATE_WINDOW_SECONDS, *, keep_window: bool = False) -> None:
        self._width = width
        self._keep = keep_window
        self._times: deque[tuple[float, Any]] = deque()
        self.peak = 0
        self.peak_window: tuple[tuple[float, Any], ...] = ()

    def add(self, t: float, tag: Any = None) -> None:
        times = self._times
        times.append((t, tag))
        cutoff = t - self._width
        while times[0][0] <= cutoff:
            times.popleft()
        if len(times) > self.peak:
            self.peak = len(times)
            if self._keep:
                self.peak_window = tuple(times)


class LoopStalls:
    """How late the site's ticker fired: the largest lateness, and the
    :data:`STALLS_KEPT` largest stalls of at least :data:`STALL_KEPT_MIN` (time, seconds)."""

    __slots__ = ("kept", "largest", "tick", "ticks")

    def __init__(self, tick: float) -> None:
        self.tick = tick
        self.ticks = 0
        self.largest = 0.0
        self.kept: list[tuple[float, float]] = []  # a min-heap of (seconds, time)

    def add(self, at: float, late: float) -> None:
        """The tick due at *at* fired *late* seconds after it."""
        self.ticks += 1
        self.largest = max(self.largest, late)
        if late < STALL_KEPT_MIN:
            return
        if len(self.kept) < STALLS_KEPT:
            heapq.heappush(self.kept, (late, at))
        elif late > self.kept[0][0]:
            heapq.heapreplace(self.kept, (late, at))

    def snapshot(self, start: float) -> dict[str, Any]:
        return {
            "tick_ms": round(self.tick * 1000, 3),
            "ticks": self.ticks,
            "max_ms": round(self.largest * 1000, 3),
            "stalls": [
                [round(at - start, 4), round(late * 1000, 3)]
                for late, at in sorted(self.kept, key=lambda k: k[1])
            ],
        }


#: A host's robots.txt arrivals kept (the first ones).
ROBOTS_KEPT = 4

#: Distinct client labels tracked; more are counted together as "(other)".
MAX_CLIENTS = 64


class _Client:
    """The requests of one client label: count, first and last arrival, and the peak
    1-second rate per host."""

    __slots__ = ("banned", "first", "last", "rates", "requests")

    def __init__(self, hosts: int) -> None:
        self.requests = 0
        self.banned = 0
        self.first = self.last = 0.0
        self.rates = [RateWindow() for _ in range(hosts)]

    def add(self, host: int, now: float) -> None:
        if not self.requests:
            self.first = now
        self.requests += 1
        self.last = now
        self.rates[host].add(now)

    def snapshot(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "banned": self.banned,
            "first": self.first,
            "last": self.last,
            "max_rate_1s": {host_address(h): r.peak for h, r in enumerate(self.rates)},
        }


class RequestLog:
    """Counts the requests a site receives, by ``(host index, path with query)``.

    Not thread-safe: call it from the server's event loop only. Robots.txt requests are
    counted apart; the control endpoints (``/_stats``, ``/_reset``) are not counted.
    """

    def __init__(
        self, model: SiteModel, port: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._model = model
        self._port = port
        self._clock = clock
        self._content = model.content_locs()
        self._stalls: LoopStalls | None = None
        self.reset()

    def reset(self) -> None:
        """Forget every request counted so far."""
        self._counts: dict[Loc, int] = {}
        self._robots = [0] * self._model.hosts
        self._robots_at: list[list[float]] = [[] for _ in range(self._model.hosts)]
        self._banned = [0] * self._model.hosts
        self._host_requests = [0] * self._model.hosts
        self._host_rates = [RateWindow(keep_window=True) for _ in range(self._model.hosts)]
        self._arrivals = [array("d") for _ in range(self._model.hosts)]
        self._site_rate = RateWindow()
        self._stalls = None if self._stalls is None else LoopStalls(self._stalls.tick)
        self._first: float | None = None
        self._last: float | None = None
        self._clients: dict[str, _Client] = {}

    def record(self, host: int, path: str, client: str | None = None) -> None:
        """Count one request for ``path`` on host index ``host``; *client* is the
        label the crawler sent in the ``X-Crawlfleet-Client`` header, if any."""
        now = self._clock()
        if client:
            self._client(client).add(host, now)
        key = (host, path)
        self._counts[key] = self._counts.get(key, 0) + 1
        self._host_requests[host] += 1
        self._host_rates[host].add(now, (path, client))
        arrivals = self._arrivals[host]
        if len(arrivals) < ARRIVALS_KEPT:
            arrivals.append(now)
        self._site_rate.add(now)
        if self._first is None:
            self._first = now
        self._last = now

    def _client(self, label: str) -> _Client:
        found = self._clients.get(label)
        if found is None:
            if len(self._clients) >= MAX_CLIENTS:
                label = "(other)"
                found = self._clients.get(label)
            if found is None:
                found = self._clients[label] = _Client(self._model.hosts)
        return found

    def record_banned(self, host: int, client: str | None = None) -> None:
        """Count one request answered 429 (not a fetch)."""
        self._banned[host] += 1
        if client:
            self._client(client).banned += 1

    def record_robots(self, host: int) -> None:
        self._robots[host] += 1
        if len(self._robots_at[host]) < ROBOTS_KEPT:
            self._robots_at[host].append(self._clock())

    def watch_stalls(self, tick: float) -> None:
        """From now on, note the ticker's lateness (see :meth:`record_tick`)."""
        self._stalls = LoopStalls(tick)

    def record_tick(self, due: float, late: float) -> None:
        """The ticker's tick due at *due* (this log's clock) fired *late* s after it."""
        if self._stalls is not None:
            self._stalls.add(due, late)

    def count(self, loc: Loc) -> int:
        return self._counts.get(loc, 0)

    def snapshot(self, *, arrivals: bool = False) -> dict[str, Any]:
        """The counters as a JSON-ready dict (shape documented in the server module);
        with *arrivals*, each host's arrival times too."""
        url = self._model.loc_url
        port = self._port
        archive = self._model.archive
        requests: dict[str, int] = {}
        problems: dict[str, int] = {}
        unknown: dict[str, int] = {}
        archived: dict[str, int] = {}
        twice: list[dict[str, Any]] = []
        archive_twice: list[dict[str, Any]] = []
        content_requests = 0
        for loc, n in sorted(self._counts.items()):
            u = url(loc, port)
            requests[u] = n
            if loc in self._content:
                content_requests += n
                if n > 1:
                    twice.append({"url": u, "count": n})
            elif is_problem_path(loc[1]):
                problems[u] = n
            elif loc[0] == 0 and archive.resolve(loc[1]) is not None:
                archived[u] = n
                if n > 1:
                    archive_twice.append({"url": u, "count": n})
            else:
                unknown[u] = n
        never = sorted(url(loc, port) for loc in self._content if loc not in self._counts)
        active = 0.0 if self._first is None or self._last is None else self._last - self._first
        start = self._first if self._first is not None else 0.0
        return {
            "port": port,
            "total_requests": sum(self._host_requests),
            "max_rate_1s": self._site_rate.peak,
            "rate_window": "exact sliding 1 s window over request arrival times",
            "active_seconds": round(active, 6),
            "hosts": {
                host_address(h): {
                    "requests": self._host_requests[h],
                    "max_rate_1s": self._host_rates[h].peak,
                    "peak_window": [
                        [round(t - start, 4), f"{path} {client or ''}".rstrip()]
                        for t, (path, client) in self._host_rates[h].peak_window
                    ],
                    "robots_at": [round(t - start, 4) for t in self._robots_at[h]],
                }
                for h in range(self._model.hosts)
            },
            "expected_urls": len(self._content),
            "content_requests": content_requests,
            "content_fetched": len(self._content) - len(never),
            "fetched_twice": twice,
            "never_fetched": never,
            "problem_requests": problems,
            "unknown_requests": unknown,
            "robots_requests": {host_address(h): n for h, n in enumerate(self._robots)},
            "banned": {host_address(h): n for h, n in enumerate(self._banned)},
            "clients": {label: c.snapshot() for label, c in sorted(self._clients.items())},
            "archive": {
                "units": archive.unit_count(),
                "expected_urls": archive.url_count(),
                "total_requests": sum(archived.values()),
                "fetched": len(archived),
                "fetched_twice": archive_twice,
                "requests": archived,
            },
            "loop_stalls": None if self._stalls is None else self._stalls.snapshot(start),
            "requests": requests,
        } | (
            {
                "arrivals_kept": ARRIVALS_KEPT,
                "arrivals": {
                    host_address(h): [round(t - start, 6) for t in times]
                    for h, times in enumerate(self._arrivals)
                },
            }
            if arrivals
            else {}
        )
