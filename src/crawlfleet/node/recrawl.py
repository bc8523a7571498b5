"""The automatic re-crawl phase of a job (``CRAWLFLEET_RECRAWL_ROUNDS`` > 0): once the
main work is done (the job's frontier empty for ``SETTLE_SECONDS`` in a row, after it
had work), the nodes put the job's open failures of ``CRAWLFLEET_RECRAWL_REASONS`` back
into the frontier (:func:`~crawlfleet.fleet.errors.recrawl_errors`; each failure at most
``CRAWLFLEET_RECRAWL_ROUNDS`` times) and crawl them again; a request that succeeds
resolves its failure. The job finishes when a round finds nothing left to re-crawl.
Several nodes may look at once: the registry hands each failure to one of them.

A round that lasts longer than ``CRAWLFLEET_PROGRESS_SECONDS`` says how far it got
that often (the failures this node queued: re-fetched, fixed, failed again, waiting,
and the back-off of the sites they wait on), and its tally when it ends
(:mod:`crawlfleet.node.progress`).

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
from crawlfleet.node.progress import Cadence, progress_seconds, recrawl_line
from crawlfleet.node.scheduler import Scheduler
from crawlfleet.outage import Outage
from crawlfleet.parts import parts_of
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
    until the loop lets go; ``db`` is the state DB at ``db_url`` once opened.
    ``cadence`` paces its progress lines (every *progress_seconds*); ``phase``, the
    latest of them, is in the node's heartbeat status."""

    HOLD = ""

    def __init__(self, crawler: Crawler, db_url: str, progress_seconds: float = 0.0) -> None:
        self.crawler = crawler
        self.db_url = db_url
        self.db: Any = None
        self.task: asyncio.Task[None] | None = None
        self.cadence = Cadence(progress_seconds)
        self.phase = ""
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)
        parts_of(crawler).status_providers.append(self.status)

    def status(self) -> dict[str, Any]:
        """For the node's heartbeat status: ``{"phase": ...}`` while there is one."""
        return {"phase": self.phase} if self.phase else {}

    def spider_opened(self, spider: Spider) -> None:
        scheduler = Scheduler.of(self.crawler)
        if scheduler is None:
            logger.error("%s needs the crawlfleet scheduler: off", type(self).__name__)
            return
        scheduler.lifecycle.holds.add(self.HOLD)
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
        """The loop; it lets the job go with ``scheduler.lifecycle.holds.discard(HOLD)``."""


class RecrawlPhase(HeldLoop):
    """See the module docstring."""

    HOLD = HOLD

    def __init__(
        self,
        crawler: Crawler,
        db_url: str,
        rounds: int,
        reasons: list[str],
        progress_seconds: float = 0.0,
    ) -> None:
        super().__init__(crawler, db_url, progress_seconds)
        self.rounds = rounds
        self.reasons = reasons
        self.queued = 0
        #: the errors this node queued in its current round
        self.round_ids: list[int] = []
        #: some of them were still waiting to be fetched at the last look (once none
        #: is, the round only settles: its tally comes at its end)
        self.waiting = False

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
        return cls(
            crawler,
            check_state_db_url(state_db_url(s)),
            rounds,
            reasons,
            progress_seconds(s),
        )

    async def _look(self, scheduler: Any, settled: Settled) -> tuple[int, list[Any]] | None:
        """One look: the progress line when due; None while the frontier has not settled,
        else the failed requests queued again (their count and registry ids)."""
        from crawlfleet.fleet.errors import recrawl_errors

        if self.waiting and self.cadence.due():
            await self._say_progress(scheduler)
        if not await settled.check(scheduler.frontier):
            return None
        if self.db is None:
            self.db = await asyncio.to_thread(open_db, self.db_url)
        if self.round_ids:  # the round is over: the frontier settled
            await self._round_over(scheduler)
        queued, ids = 0, []
        for reason in self.reasons:
            done = await recrawl_errors(
                scheduler.frontier, self.db, reason=reason, max_recrawls=self.rounds
            )
            queued += done.queued
            ids += done.ids
        return queued, ids

    async def _run(self, scheduler: Any) -> None:
        settled = Settled()
        outage = Outage(
            "the re-crawl phase's Redis or state DB",
            every=OUTAGE_LOG_SECONDS,
            say_down=lambda exc: logger.warning(
                "Re-crawl phase: %s; trying again", redact(str(exc))
            ),
            say_still=lambda exc, seconds: logger.warning(
                "Re-crawl phase: %s (for %.0fs); trying again", redact(str(exc)), seconds
            ),
            say_back=lambda seconds: logger.info("Re-crawl phase: going on after %.1fs", seconds),
        )
        checked = -1  # the epoch in which a round found nothing to re-crawl
        while True:
            await asyncio.sleep(ROUND_SECONDS)
            try:
                look = await self._look(scheduler, settled)
            except Exception as exc:  # Redis or the state DB: the next look tries again
                outage.failed(exc)
                continue
            outage.succeeded()
            if look is None:
                continue
            queued, ids = look
            if queued:
                settled.reset()
                self.queued += queued
                self.round_ids, self.waiting = ids, True
                self.cadence.start()
                self.phase = f"re-crawl: {queued} failed request(s) queued again"
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
            self.phase = ""
            scheduler.lifecycle.holds.discard(HOLD)
            return

    async def _progress(self, scheduler: Any, *, over: bool = False) -> None:
        """Say how this node's round stands (*over*: its tally, the round done)."""
        from crawlfleet.fleet.errors import recrawl_standing

        if self.db is None:
            self.db = await asyncio.to_thread(open_db, self.db_url)
        half_life = scheduler.config.backoff.half_life_seconds
        progress, backoff = await recrawl_standing(
            scheduler.frontier, self.db, self.round_ids, half_life_ms=int(half_life * 1000)
        )
        elapsed = self.cadence.elapsed() if over else None
        line = recrawl_line(progress, self.rounds, backoff, seconds=elapsed)
        line.log(logger)
        self.phase = str(line)
        self.waiting = progress["queued"] > 0

    async def _say_progress(self, scheduler: Any, *, over: bool = False) -> None:
        """:meth:`_progress`, which never stops the phase: Redis or the state DB failing
        is said by the phase's own calls."""
        try:
            await self._progress(scheduler, over=over)
        except Exception:
            logger.debug("Re-crawl phase: no progress line this time", exc_info=True)

    async def _round_over(self, scheduler: Any) -> None:
        """The frontier settled after this node's round: its tally, if it was long."""
        if self.cadence.due(change=True):
            await self._say_progress(scheduler, over=True)
        self.round_ids, self.waiting = [], False
        self.cadence.stop()
