"""When a node's work is over: the job finished, drained, or stopped by the operator.

A job is finished when nothing is queued, nothing is leased, no node is busy, for
CRAWLFLEET_FINISH_GRACE_SECONDS in a row, and it had work at some point: nodes started
before the first seed wait for it (and say so once a minute). A part that feeds the job
from outside (a campaign, a re-crawl phase) keeps it from finishing for this node while
it holds it (:attr:`Lifecycle.holds`).
"""

from __future__ import annotations

import asyncio
import logging
import math

from crawlfleet.frontier.config import FrontierConfig
from crawlfleet.frontier.records import JobState
from crawlfleet.node.engine import EngineHooks

__all__ = ["NO_WORK_LOG_SECONDS", "Lifecycle"]

logger = logging.getLogger(__name__)

#: A node waiting for a job's first seed says so this often.
NO_WORK_LOG_SECONDS = 60.0


class Lifecycle:
    """Whether the job is finished, and closing the node once."""

    def __init__(self, config: FrontierConfig, engine: EngineHooks, node_id: str) -> None:
        self.config = config
        self.engine = engine
        self.node_id = node_id
        #: the job is finished (as of the last heartbeat)
        self.finished = False
        #: close() has begun
        self.closing = False
        self._close_asked = False
        self._empty_since: float | None = None
        self._next_no_work_log = 0.0
        #: the seed key this node reads ("" for none), named while it waits for seeds
        self.seed_key = ""
        #: reasons the job must not count as finished for this node ("campaign",
        #: "recrawl": parts that may queue more work); each part adds and discards its own
        self.holds: set[str] = set()

    def update(
        self,
        state: JobState,
        idle: bool,
        seeds_waiting: bool,
        now: float,
        seeds_read_at: float = math.inf,
    ) -> None:
        """Take in the job's *state* as a heartbeat read it (*idle*: this node holds
        nothing; *seeds_waiting*: more work is on its way: its seed key is not empty, or
        a campaign holds the job open; *now*: monotonic; *seeds_read_at*: when the seed
        key was last read (monotonic; inf: no key): the job is finished only once it
        was read, and found empty, after the job looked finished)."""
        empty = idle and state.empty and not seeds_waiting
        if empty and state.leased_total == 0:
            # a job that never had work is not finished: nodes started before the
            # first seed wait for it
            if now >= self._next_no_work_log:
                self._next_no_work_log = now + NO_WORK_LOG_SECONDS
                where = f"in {self.seed_key} or " if self.seed_key else ""
                logger.info(
                    "Job %r has no work yet: waiting for seeds (%scrawlfleet seed %s URL...)",
                    self.config.job,
                    where,
                    self.config.job,
                )
            empty = False
        if not empty:
            self._empty_since = None
            self.finished = False
            return
        if self._empty_since is None:
            self._empty_since = now
        if (
            not self.finished
            and now - self._empty_since >= self.config.finish_grace_seconds
            and seeds_read_at >= self._empty_since
        ):
            self.finished = True
            if self.config.close_when_finished:
                logger.info(
                    "Job %r is finished: nothing queued, nothing leased, no node busy",
                    self.config.job,
                )
            self.engine.wake()

    @property
    def empty_since(self) -> float | None:
        """Since when (monotonic) the job has looked finished to this node, if it does."""
        return self._empty_since

    def close_once(self, reason: str) -> None:
        """Ask the engine to close the spider (once; not while closing already)."""
        if not (self.closing or self._close_asked):
            self._close_asked = True
            logger.info("Control: node %s closes (%s)", self.node_id, reason)
            asyncio.get_running_loop().call_soon(self.engine.close, reason)
