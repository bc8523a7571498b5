"""Per-site figures a node publishes with its heartbeat (``sites`` in its status): for
the sites it works on most, the leases it holds and the requests it finished per minute.

Finishing a request costs one counter increment in the current one-second bucket; the
buckets of the last ``window_seconds`` are summed only when the status is published.
The manager adds the figures of a job's live nodes up into each site's live rate.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable

__all__ = ["SITES_SHOWN", "SiteRates"]

#: Sites a node publishes at most (those with the most leases and finished requests).
SITES_SHOWN = 20


class SiteRates:
    """Requests finished per site over a sliding window of one-second buckets."""

    def __init__(
        self, window_seconds: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if window_seconds <= 0:
            raise ValueError(f"window_seconds must be > 0, got {window_seconds}")
        self.window_seconds = window_seconds
        self.clock = clock
        self._started = clock()
        self._buckets: deque[tuple[int, Counter[str]]] = deque()

    def done(self, site: str) -> None:
        """One request of *site* finished now."""
        second = math.floor(self.clock())
        if not self._buckets or self._buckets[-1][0] != second:
            self._buckets.append((second, Counter()))
            self._drop_old(second)
        self._buckets[-1][1][site] += 1

    def _drop_old(self, now_second: int) -> None:
        oldest = now_second - math.ceil(self.window_seconds)
        while self._buckets and self._buckets[0][0] <= oldest:
            self._buckets.popleft()

    def figures(self, held_sites: Iterable[str]) -> dict[str, dict[str, float | int]]:
        """``{site: {"leased", "done_per_min"}}`` for at most SITES_SHOWN sites: those
        with the most leases held (*held_sites*: the site of each) and requests done."""
        now = self.clock()
        self._drop_old(math.floor(now))
        recent: Counter[str] = Counter()
        for _, counts in self._buckets:
            recent.update(counts)
        held = Counter(held_sites)
        span = min(self.window_seconds, max(1.0, now - self._started))
        ranked = sorted(set(recent) | set(held), key=lambda s: (-(held[s] + recent[s]), s))
        return {
            site: {"leased": held[site], "done_per_min": round(recent[site] * 60.0 / span, 1)}
            for site in ranked[:SITES_SHOWN]
        }
