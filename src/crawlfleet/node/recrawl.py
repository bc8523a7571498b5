"""The automatic re-crawl phase of a job (``CRAWLFLEET_RECRAWL_ROUNDS`` > 0): once the
main work is done (the job's frontier empty for ``SETTLE_SECONDS`` in a row, after it
had work), the nodes put the job's open failures of ``CRAWLFLEET_RECRAWL_REASONS`` back
into the frontier (:func:`~crawlfleet.fleet.errors.recrawl_errors`; each failure at most
``CRAWLFLEET_RECRAWL_ROUNDS`` times) and crawl them again; a request that succeeds
resolves its failure. The job finishes when a round finds nothing left to re-crawl.
Several nodes may look at once: the registry hands each failure to one of them.

A campaign (``CRAWLFLEET_CAMPAIGN``) has this phase built in (its ``max_attempts``), so
this extension stands aside there. :class:`HeldLoop`, :class:`Settled` and
:func:`open_db` serve both.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from typing import Any

from scrapy import Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured

from crawlfleet.exceptions import ConfigError
from crawlfleet.middlewares.common import node_of
from crawlfleet.redis.connection import redact
from crawlfleet.state.records import REASONS
from crawlfleet.state.url import check_state_db_url, state_db_url

__all__ = ["SETTLE_SECONDS", "HeldLoop", "RecrawlPhase", "Settled", "open_db"]

logger = logging.getLogger(__name__)

#: The frontier must be seen empty this long before a phase ends or a round starts: the
#: last failures may still be on their way to the registry (its writer flushes every
#: second).
SETTLE_SECONDS = 2.5
#: Seconds between two looks.
ROUND_SECONDS = 1.0
#: While Redis or the state DB fails, the node says so this often.
OUTAGE_LOG_SECONDS = 60.0
HOLD = "recrawl"


def open_db(url: str) -> Any:
    """The state DB at *url*, migrated (blocking: run it in a thread)."""
    from crawlfleet.state.db import StateDB

    db = StateDB.open(url)
    try:
        db.upgrade()
    except BaseException:
        db.close()
        raise
    return db


class Settled:
    """Whether a job's frontier has stayed empty (nothing queued, nothing leased) for
    :data:`SETTLE_SECONDS`, after the job had work. ``epoch`` changes whenever the
    frontier is seen busy (or :meth:`reset` is called): a conclusion drawn in one epoch
    holds while it lasts."""

    def __init__(self) -> None:
        self._since: float | None = None
        self.epoch = 0

    def reset(self) -> None:
        """Work was queued (or may have been): the frontier must settle anew."""
        self._since = None
        self.epoch += 1

    def restart(self) -> None:
        """Settle for another whole window, in the same epoch."""
        self._since = asyncio.get_running_loop().time()

    async def check(self, frontier: Any) -> bool:
        counters = await frontier.counters()
        empty = counters.get("queued", 0) <= 0 and counters.get("leased", 0) <= 0
        if not empty or counters.get("leased_total", 0) <= 0:
            self.reset()
            return False
        now = asyncio.get_running_loop().time()
        if self._since is None:
            self._since = now
        return now - self._since >= SETTLE_SECONDS


class HeldLoop(ABC):
    """A node extension that runs :meth:`_run` on the node's event loop from the spider's
    opening to its close, keeping the job open for this node (a hold named ``HOLD``)
    until the loop lets go; ``db`` is the state DB at ``db_url`` once opened."""

    HOLD = ""

    def __init__(self, crawler: Crawler, db_url: str) -> None:
        self.crawler = crawler
        self.db_url = db_url
        self.db: Any = None
        self.task: asyncio.Task[None] | None = None
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    def spider_opened(self, spider: Spider) -> None:
        scheduler = node_of(self.crawler)
        if scheduler is None:
            logger.error("%s needs the crawlfleet scheduler: off", type(self).__name__)
            return
        scheduler.sync.holds.add(self.HOLD)
        self.task = asyncio.ensure_future(self._run(scheduler))

    async def spider_closed(self, spider: Spider) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        if self.db is not None:
            self.db.close()

    @abstractmethod
    async def _run(self, scheduler: Any) -> None:
        """The loop; it lets the job go with ``scheduler.sync.holds.discard(HOLD)``."""


class RecrawlPhase(HeldLoop):
    """See the module docstring."""

    HOLD = HOLD

    def __init__(self, crawler: Crawler, db_url: str, rounds: int, reasons: list[str]) -> None:
        super().__init__(crawler, db_url)
        self.rounds = rounds
        self.reasons = reasons
        self.queued = 0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RecrawlPhase:
        s = crawler.settings
        rounds = s.getint("CRAWLFLEET_RECRAWL_ROUNDS")
        if rounds < 0:
            raise ConfigError(f"CRAWLFLEET_RECRAWL_ROUNDS must be >= 0, got {rounds}")
        if rounds == 0:
            raise NotConfigured  # CRAWLFLEET_RECRAWL_ROUNDS is 0 (no message: Scrapy warns of one)
        if str(s.get("CRAWLFLEET_CAMPAIGN") or "").strip():
            raise NotConfigured  # a campaign re-crawls in its own phase (no message: no warning)
        if not s.getbool("CRAWLFLEET_ERRORS"):
            raise ConfigError("CRAWLFLEET_RECRAWL_ROUNDS needs CRAWLFLEET_ERRORS (the registry)")
        reasons = [
            str(r).strip() for r in s.getlist("CRAWLFLEET_RECRAWL_REASONS") if str(r).strip()
        ]
        unknown = [r for r in reasons if r not in REASONS]
        if unknown or not reasons:
            raise ConfigError(
                f"CRAWLFLEET_RECRAWL_REASONS must list reasons among {', '.join(REASONS)}, "
                f"got {reasons!r}"
            )
        return cls(crawler, check_state_db_url(state_db_url(s)), rounds, reasons)

    async def _run(self, scheduler: Any) -> None:
        from crawlfleet.fleet.errors import recrawl_errors

        settled = Settled()
        frontier = scheduler.sync.frontier
        said = -OUTAGE_LOG_SECONDS
        checked = -1  # the epoch in which a round found nothing to re-crawl
        while True:
            await asyncio.sleep(ROUND_SECONDS)
            try:
                if not await settled.check(frontier):
                    continue
                if self.db is None:
                    self.db = await asyncio.to_thread(open_db, self.db_url)
                queued = 0
                for reason in self.reasons:
                    done = await recrawl_errors(
                        frontier, self.db, reason=reason, max_recrawls=self.rounds
                    )
                    queued += done.queued
            except Exception as exc:  # Redis or the state DB: the next look tries again
                now = asyncio.get_running_loop().time()
                if now - said >= OUTAGE_LOG_SECONDS:
                    said = now
                    logger.warning("Re-crawl phase: %s; trying again", redact(str(exc)))
                continue
            if queued:
                settled.reset()
                self.queued += queued
                scheduler.stats.inc("crawlfleet/recrawl/queued", queued)
                logger.info("Re-crawl phase: %d failed request(s) queued again", queued)
                scheduler.sync.leaser.work_arrived()
                continue
            if checked != settled.epoch:
                # another node's round may be on its way into the frontier: conclude
                # only after a whole window more without work
                checked = settled.epoch
                settled.restart()
                continue
            logger.info("Re-crawl phase: nothing left to re-crawl")
            scheduler.sync.holds.discard(HOLD)
            return
