"""The seed list a node reads (scrapy-redis compatible): CRAWLFLEET_START_URLS_KEY
names a Redis list of URLs or JSON seeds; nodes queue them into the frontier, then
remove them from the list (queued first: a crash in between reads them again and the
seen-filter drops the repeats)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from scrapy import Request, Spider

from crawlfleet.exceptions import SerializationError
from crawlfleet.frontier.base import FrontierBackend
from crawlfleet.node.ledger import Outbound
from crawlfleet.node.stats import NodeStats
from crawlfleet.spiders.seeding import parse_seed

__all__ = ["SeedReader", "request_from_seed"]

logger = logging.getLogger(__name__)


def request_from_seed(spider: Spider | None, raw: bytes) -> Request:
    """The request of seed *raw*: the spider's ``make_request_from_data`` where it has
    one (scrapy-redis spiders decide themselves), else :func:`parse_seed`."""
    make = getattr(spider, "make_request_from_data", None)
    if callable(make):
        request = make(raw)
        if not isinstance(request, Request):
            raise TypeError(f"make_request_from_data returned {type(request).__name__}")
        return request
    return parse_seed(raw)


class SeedReader:
    """Reads batches of *key* while it has entries, else looks again after a while."""

    def __init__(self, frontier: FrontierBackend, key: str, batch: int, stats: NodeStats) -> None:
        self.frontier = frontier
        self.key = key
        self.batch = batch
        self.stats = stats
        #: the list had entries at the last read (the job is not finished)
        self.waiting = False
        #: monotonic time of the next read
        self.next_at = 0.0

    async def pull(
        self,
        make: Callable[[bytes], Outbound],
        queue: Callable[[list[Outbound]], Awaitable[None]],
        idle_delay: float,
    ) -> None:
        """Read one batch; *make* turns an entry into an outbound request, *queue*
        commits them to the frontier; with nothing to read, wait *idle_delay* (at
        least 1 s) before the next read."""
        entries = await self.frontier.read_seeds(self.key, self.batch)
        self.waiting = bool(entries)
        if not entries:
            self.next_at = time.monotonic() + max(idle_delay, 1.0)
            return
        outgoing: list[Outbound] = []
        for raw in entries:
            try:
                outgoing.append(make(raw))
            except (ValueError, TypeError, SerializationError) as exc:
                logger.warning("Invalid seed %r in %s skipped: %s", raw[:200], self.key, exc)
                self.stats.inc("crawlfleet/seeds/invalid")
        await queue(outgoing)
        await self.frontier.trim_seeds(self.key, entries)
        self.stats.inc("crawlfleet/seeds/read", len(entries))
        self.next_at = 0.0
