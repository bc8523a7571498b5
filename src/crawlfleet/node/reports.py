"""What a node has learned about sites and tells every other node: back-off requests
(a site answered 429/503, or slowed down) and robots.txt Crawl-delays. The
``SiteThrottle`` middleware (crawlfleet.middlewares.throttle) notes them here; the
scheduler's loop sends them in at most two script calls per round."""

from __future__ import annotations

import logging
from collections.abc import Callable

from crawlfleet.frontier.base import FrontierBackend
from crawlfleet.frontier.config import BackoffConfig

__all__ = ["SiteReports"]

logger = logging.getLogger(__name__)


class SiteReports:
    """Reports waiting to be sent; :meth:`send` keeps them when Redis fails."""

    def __init__(self, backoff: BackoffConfig, count: Callable[[str, int], None]) -> None:
        self.backoff = backoff
        self.count = count
        self._slow: dict[str, tuple[int, int, str]] = {}  # site -> (floor, first ms, why)
        self._by_latency: set[str] = set()  # sites of _slow reported for latency alone
        self._recovered: dict[str, str] = {}  # site -> why
        self._robots: dict[str, int] = {}  # site -> Crawl-delay ms (0: none)

    def __bool__(self) -> bool:
        return bool(self._slow or self._robots or self._recovered)

    @property
    def slow(self) -> dict[str, tuple[int, int, str]]:
        """site -> (floor ms, first back-off ms, why)."""
        return dict(self._slow)

    @property
    def recovered(self) -> dict[str, str]:
        """site -> why, of the sites to report recovered."""
        return dict(self._recovered)

    @property
    def robots(self) -> dict[str, int]:
        return dict(self._robots)

    def add_slow(
        self, site: str, why: str, floor_ms: int = 0, first_ms: int = 0, *, latency: bool = False
    ) -> None:
        """Back *site* off for every node, never below *floor_ms*; a site not backed off
        yet starts at *first_ms* (0: CRAWLFLEET_BACKOFF_START_SECONDS). The largest
        floor of a round wins. *latency*: for its latency alone (ends on
        :meth:`add_recovered`)."""
        first = first_ms or int(self.backoff.start_seconds * 1000)
        current = self._slow.get(site)
        if current is None or floor_ms > current[0]:
            self._slow[site] = (floor_ms, first, why)
        if latency and (current is None or site in self._by_latency):
            self._by_latency.add(site)
        else:
            self._by_latency.discard(site)
        self._recovered.pop(site, None)

    def add_recovered(self, site: str, why: str) -> None:
        """*site* answers at its normal latency again: its latency back-off ends (a
        latency report of this round is dropped)."""
        if site in self._by_latency:
            self._by_latency.discard(site)
            self._slow.pop(site, None)
        self._recovered[site] = why

    def add_robots(self, site: str, delay_ms: int) -> None:
        """*site*'s robots.txt Crawl-delay (0: read, none)."""
        self._robots[site] = delay_ms

    async def send(self, frontier: FrontierBackend) -> None:
        slow, self._slow = self._slow, {}
        by_latency, self._by_latency = self._by_latency, set()
        recovered, self._recovered = self._recovered, {}
        robots, self._robots = self._robots, {}
        b = self.backoff
        try:
            raised = await frontier.backoff(
                {site: (floor, first) for site, (floor, first, _why) in slow.items()},
                longest_ms=int(b.max_seconds * 1000),
                half_life_ms=int(b.half_life_seconds * 1000),
                latency=by_latency,
            )
            reasons, slow = {site: why for site, (_f, _s, why) in slow.items()}, {}
            lifted = await frontier.recovered(recovered)
            recovered_why, recovered = recovered, {}
            await frontier.set_robots(robots)
        except BaseException:
            for site, entry in slow.items():  # keep them for the next round
                self._slow.setdefault(site, entry)
            self._by_latency |= by_latency & set(slow)
            self._recovered = {**recovered, **self._recovered}
            self._robots = {**robots, **self._robots}
            raise
        for site in lifted:
            self.count("crawlfleet/backoff/lifted", 1)
            logger.warning(
                "Back-off of %s lifted for every node (%s)", site, recovered_why.get(site, "")
            )
        for site, ms in raised.items():
            self.count("crawlfleet/backoff/raised", 1)
            logger.warning(
                "Backing off %s for every node: %.1fs between requests (%s)",
                site,
                ms / 1000,
                reasons[site],
            )
        for site, ms in robots.items():
            if ms:
                logger.info(
                    "robots.txt of %s asks for a Crawl-delay: %.2fs between its requests "
                    "for every node",
                    site,
                    ms / 1000,
                )
