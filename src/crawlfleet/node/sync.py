"""The node's sync loop: all of its traffic with the frontier, in rounds, off the engine.

One task on the reactor's asyncio loop. Each part of the traffic has a class of its own,
which this loop builds and runs in rounds:

- :class:`~crawlfleet.node.outbox.Outbox`: what the engine finished is acknowledged,
  new requests go in one ``commit`` per batch, leases given back are released;
- :class:`~crawlfleet.node.heartbeat.Heartbeat`: the node's registration and leases
  renewed, the job's state, limits and commands read (and applied by
  :class:`~crawlfleet.node.control.Control`), expired leases of any node reclaimed;
- :class:`~crawlfleet.node.leasing.Leaser`: the ledger refilled with leased requests,
  sized to free capacity (rate-limited sites come with send times, which wake the
  engine by timer);
- :class:`~crawlfleet.node.reports.SiteReports` and
  :class:`~crawlfleet.node.seeds.SeedReader`: what the node learned about sites goes
  out, seeds come in.

Between rounds the loop sleeps until woken (:meth:`SyncLoop.kick`: new work, a low
buffer) or until the next slot or lease is due. A round the frontier does not answer is
given up as a whole: the node keeps what it holds, says so at once and every minute,
and tries again after a back-off (:meth:`~crawlfleet.outage.Outage.attempt`) that only
closing cuts short. While ``CRAWLFLEET_ITEMS_PENDING_MAX`` items or more wait for the
item stores, it leases nothing (and gives back the requests it holds ready while a store
is down); the node's state says :data:`~crawlfleet.node.backlog.WAITING_FOR_STORE`
(:meth:`~crawlfleet.node.backlog.Backlog.watch`). It goes on once they are written.

It joins the job at :meth:`SyncLoop.open` and leaves it at :meth:`SyncLoop.close`
(:class:`~crawlfleet.node.leaving.Leaving`: nothing held is lost, and a final failure
is never acknowledged before it is recorded).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from scrapy import Request, Spider

from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.frontier.sites import SiteKeyer
from crawlfleet.node.backlog import Backlog
from crawlfleet.node.control import Control
from crawlfleet.node.core import NodeCore
from crawlfleet.node.heartbeat import Heartbeat
from crawlfleet.node.joining import join
from crawlfleet.node.leasing import Leaser
from crawlfleet.node.leaving import Leaving
from crawlfleet.node.outbox import Outbox
from crawlfleet.node.reports import SiteReports
from crawlfleet.node.seeds import SeedReader
from crawlfleet.outage import Backoff, Failures, Outage
from crawlfleet.redis.config import RedisConfig

__all__ = ["SyncLoop"]

logger = logging.getLogger(__name__)

#: Pace of the loop when nothing wakes it.
LOOP_SECONDS = 0.05
#: While Redis stays unreachable, the node says so this often.
OUTAGE_LOG_SECONDS = 60.0
#: Batches of new requests sent per round at most (then heartbeat and lease).
FLUSHES_PER_ROUND = 2


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class SyncLoop:
    """Keeps the node's ledger in step with its frontier (both in *core*, which every
    component the loop builds shares)."""

    def __init__(
        self,
        core: NodeCore,
        *,
        redis_config: RedisConfig,
        sites: SiteKeyer,
        fingerprint: Callable[[Request], bytes],
        status: Callable[[], dict[str, Any]],
    ) -> None:
        self.core = core
        self.redis_config = redis_config
        config = core.config
        #: items waiting for the item stores (the stores register with it)
        self.backlog = Backlog(config.items_pending_max)
        #: when and how much to lease (its ``budgets``: the configured limits with the
        #: fleet's run-time limits over them, and the job's own)
        self.leaser = Leaser(core, backlog=self.backlog)
        #: what this node learned about sites (back-off, robots.txt), to send
        self.reports = SiteReports(config.backoff, core.stats.inc)
        self.seeds = SeedReader(core) if config.start_urls_key else None
        core.lifecycle.seed_key = config.start_urls_key
        #: the job's limits and commands, applied (as each heartbeat reads them)
        control = Control(core, leaser=self.leaser, concurrency_changed=self.apply_concurrency)
        #: the node's registration, its leases renewed, expired ones reclaimed
        self.heartbeat = Heartbeat(
            core,
            leaser=self.leaser,
            control=control,
            seeds=self.seeds,
            status=status,
            idle=self.locally_idle,
            feeding=lambda: self.outbox.feeding,
        )
        #: new requests, acknowledgements, leases given back
        self.outbox = Outbox(
            core,
            leaser=self.leaser,
            sites=sites,
            fingerprint=fingerprint,
            reclaim_by=self.heartbeat.reclaim_by,
        )
        self.leaser.epoch_seen = self.outbox.leased_in
        self.backoff = Backoff(redis_config.retry_min_seconds, redis_config.retry_max_seconds)
        self.outage = Outage("Redis", self._waiting, OUTAGE_LOG_SECONDS)
        self._failures = Failures("crawlfleet sync loop (retrying every second)", logger)
        #: the close: everything handed back or in
        self.leaving = Leaving(
            core, outbox=self.outbox, heartbeat=self.heartbeat, backoff=self.backoff
        )
        self._task: asyncio.Task[None] | None = None
        self._opened = False
        # waking the loop: a future it sleeps on, resolved by kick(); a kick while it
        # is busy is remembered so that its next sleep returns at once
        self._waiter: asyncio.Future[None] | None = None
        self._waiter_wakes_on_work = True
        self._kicked = False

    # -- start and stop --------------------------------------------------------------
    async def open(self, spider: Spider | None, *, flush_first: bool = False) -> None:
        """Join the job (:func:`~crawlfleet.node.joining.join`: reset it first when
        *flush_first*) and start the loop. RedisUnreachable or ConfigError when it cannot
        join: the loop is not started, and :meth:`close` has nothing to hand back."""
        self.outbox.spider = spider
        self.leaser.codec = RequestCodec(spider)
        self._opened = True
        await join(
            self.core.frontier,
            self.core.node_id,
            self.core.config,
            self.redis_config,
            self.backoff,
            flush_first=flush_first,
        )
        self._task = asyncio.ensure_future(self._run())

    async def close(self, reason: str, summary: Callable[[str], dict[str, Any]]) -> None:
        """Stop the loop and leave the job (:class:`~crawlfleet.node.leaving.Leaving`),
        keeping the node's *summary*."""
        self.core.lifecycle.closing = True
        self.kick(closing=True)
        if self._task is None:
            return  # never reached Redis (or never opened): nothing held, nothing to say
        await self._task
        await self.leaving.leave(reason, summary)

    # -- waking ------------------------------------------------------------------------
    def kick(self, *, closing: bool = False) -> None:
        """Wake the loop (or make its next sleep return at once)."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            if closing or self._waiter_wakes_on_work:
                waiter.set_result(None)
        elif self._opened:
            self._kicked = True

    def kick_for_work(self) -> None:
        """The ledger runs low: wake the loop if it may lease now (not while it backs
        off from an empty job, nor when it is awake anyway)."""
        if self.leaser.may_lease() and not self._kicked:
            self.kick()

    def low(self) -> bool:
        """The node should lease now (:meth:`~crawlfleet.node.leasing.Leaser.low`)."""
        return self.leaser.low()

    def feed(self, requests: list[Request]) -> asyncio.Future[int]:
        """Queue *requests* in the frontier from outside the engine (see
        :meth:`~crawlfleet.node.outbox.Outbox.feed`), retried while Redis fails."""
        done = self.outbox.feed(requests)
        self.kick()
        return done

    def apply_concurrency(self) -> None:
        """The steering's concurrency changed: resize the downloader, lease for it."""
        self.core.engine.set_concurrency(self.core.steering.concurrency)
        self.kick_for_work()

    def locally_idle(self) -> bool:
        """This node holds nothing and the engine reads no start requests."""
        return not (self.core.ledger.busy or self.core.engine.starting())

    # -- the loop --------------------------------------------------------------------
    async def _run(self) -> None:
        while not self.core.lifecycle.closing:
            try:
                answered = await self.outage.attempt(
                    self._round,
                    self.backoff,
                    waited=lambda: f"{len(self.core.ledger.out)} new requests waited locally",
                    wait=self._wait_out,
                )
            except Exception:
                self._failures.failed()  # once, then once a minute: never a second
                await self._sleep(1.0)
                continue
            self._failures.succeeded()
            if answered:
                await self._sleep(self._pause_seconds())

    async def _round(self) -> None:
        self.outbox.collect_finished()
        self._watch_stores()
        await self.outbox.release_given_back()
        self.heartbeat.watch_idle()
        # a bounded number of batches per round: a spider that yields requests faster
        # than they are sent (a long start()) must not keep the node from leasing work
        for _ in range(FLUSHES_PER_ROUND):
            if not self.outbox.due(time.monotonic()):
                break
            if self._leasing(time.monotonic()) and self.outbox.last_batch():
                break  # it goes with this round's lease, in one call
            await self.outbox.flush()
        now = time.monotonic()
        await self.heartbeat.due(now)
        if self.core.steering.state != "running":
            if self.core.steering.state == "draining" and self.locally_idle():
                self.core.lifecycle.close_once("drained")
        elif self.low() and now >= self.leaser.next_at:
            seq = await self._lease()
            if seq is not None:
                self.heartbeat.note_control_seq(seq)
        if self.outbox.due(time.monotonic()):
            await self.outbox.flush()  # kept for a lease that was not made
        await self.outbox.commit_feeds()
        seeds = self.seeds
        if seeds is not None and now >= seeds.next_at:
            outbox = self.outbox
            await seeds.pull(outbox.seed_outbound, outbox.queue_now, self.leaser.idle_delay)
        if self.reports:
            robots_read = bool(self.reports.robots)
            await self.reports.send(self.core.frontier)
            if self.leaser.offer or robots_read:
                # a robots.txt just read frees its site: lease now, not when the probe
                # would have ended (up to ROBOTS_PROBE_MS later)
                self.leaser.now()

    def _leasing(self, now: float) -> bool:
        """This round will lease (as far as is known before its heartbeat)."""
        return (
            self.core.steering.state == "running"
            and self.low()
            and now >= self.leaser.next_at
            and bool(self.leaser.offer)
        )

    async def _lease(self) -> int | None:
        """Lease (:meth:`~crawlfleet.node.leasing.Leaser.lease`); what waits to be
        committed goes in the same call (one script, one round trip: see
        :meth:`~crawlfleet.frontier.base.Committer.commit_lease`) when the node knows
        which sites to offer. The job's control sequence as the lease read it. While
        the call is on its way, :attr:`~crawlfleet.node.leasing.Leaser.asking` is set:
        a reply with slots is read as soon as it comes (see
        :meth:`~crawlfleet.node.scheduler.Scheduler.give_way`)."""
        self.leaser.asking = True
        try:
            ask = self.leaser.ask() if self.core.ledger.unsent else None
            if ask is None:
                return await self.leaser.lease()
            leased = await self.outbox.flush(lease=ask)
            if leased is None:
                return None  # the lease failed after the commit was done: next round
            return self.leaser.took(ask, leased, self.outbox.sent_at)
        finally:
            self.leaser.asking = False

    def _watch_stores(self) -> None:
        """Take no work while too many items wait for the item stores (see
        :meth:`~crawlfleet.node.backlog.Backlog.watch`)."""
        if not self.backlog.watch(self.core.node_id, self._give_back_ready):
            return
        self.heartbeat.now()  # the status says so at once
        if self.backlog.waiting_for_store:
            self.core.stats.inc("crawlfleet/node/store_waits")
        else:
            self.leaser.work_arrived()
            self.core.engine.wake()

    def _give_back_ready(self) -> None:
        ledger = self.core.ledger
        if ledger.ready:
            ledger.release.extend(ledger.drain_ready())

    def _waiting(self) -> str:
        ledger = self.core.ledger
        return f"{len(ledger.out)} new requests and {len(ledger.acks)} finished ones wait locally"

    def _pause_seconds(self) -> float:
        """How long the loop sleeps unless woken: LOOP_SECONDS, or until the next lease
        when that is sooner (a rate-limited site's next slot opens) and work is wanted."""
        if self.low() and self.core.steering.state == "running":
            return min(LOOP_SECONDS, max(0.0, self.leaser.next_at - time.monotonic()))
        return LOOP_SECONDS

    async def _wait_out(self, seconds: float) -> None:
        """The back-off after a round Redis did not answer (counted): only closing cuts
        it short, not new work."""
        self.core.stats.inc("crawlfleet/redis/errors")
        await self._sleep(seconds, wake_on_work=False)

    async def _sleep(self, seconds: float, *, wake_on_work: bool = True) -> None:
        """Wait *seconds*, or less when woken (new work, closing). While Redis is
        unreachable (*wake_on_work* False) only closing cuts the back-off short."""
        if self.core.lifecycle.closing or (self._kicked and wake_on_work):
            self._kicked = False
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        timer = loop.call_later(seconds, _resolve, waiter)
        self._waiter, self._waiter_wakes_on_work = waiter, wake_on_work
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None
            self._kicked = False
