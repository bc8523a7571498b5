"""The node's sync loop: all of its traffic with the frontier, in batches, off the engine.

One task on the reactor's asyncio loop. Each round it:

- acknowledges what the engine finished, and gives back leases it could not use;
- sends new requests (with the acknowledgements of the pages that produced them) in
  one ``commit`` per batch;
- heartbeats: renews this node's leases, reads the job's state, limits and control
  commands; returns the expired leases of any node to their queues;
- refills the ledger with leased requests, sized to free capacity; rate-limited sites
  come with send times (slots), which wake the engine by timer;
- sends what the node learned about sites (back-off, robots.txt), reads seeds.

It sleeps between rounds until woken (:meth:`SyncLoop.kick`: new work, a low buffer)
or until the next slot or lease is due. While the frontier is unreachable it keeps what
it holds, says so at once and every minute, and retries with back-off. While
``CRAWLFLEET_ITEMS_PENDING_MAX`` items or more wait for the item stores, it leases
nothing (and gives back the requests it holds ready while a store is down); the node's
state says :data:`~crawlfleet.node.backlog.WAITING_FOR_STORE`. It goes on once they
are written.

At close, requests whose final failure is still on its way to the error registry (see
:mod:`crawlfleet.node.ledger`) are waited for, up to ``CLOSE_RECORD_SECONDS`` (the
registry's writer is asked to write at once): those recorded by then are acknowledged,
the others given back to their queues (crawled again later), never acknowledged with
their failure unwritten.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable
from typing import Any, TypeVar

from scrapy import Request, Spider

from crawlfleet.exceptions import ConfigError, RedisUnreachable, SerializationError
from crawlfleet.frontier.base import FrontierBackend, PartialCommit
from crawlfleet.frontier.config import FrontierConfig
from crawlfleet.frontier.control import Desired
from crawlfleet.frontier.limits import Budgets, RateLimits
from crawlfleet.frontier.records import CommitResult, JobState, Outgoing
from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.frontier.sites import SiteKeyer
from crawlfleet.meta import DELAY_META
from crawlfleet.node.backlog import Backlog
from crawlfleet.node.engine import EngineHooks
from crawlfleet.node.leasing import Leaser
from crawlfleet.node.ledger import Ledger, Outbound
from crawlfleet.node.lifecycle import Lifecycle
from crawlfleet.node.reports import SiteReports
from crawlfleet.node.seeds import SeedReader, requests_from_seed
from crawlfleet.node.stats import NodeStats
from crawlfleet.node.steering import Steering
from crawlfleet.outage import Backoff, GaveUp, Outage, until_reachable
from crawlfleet.redis.config import RedisConfig
from crawlfleet.redis.connection import REDIS_ERRORS, redact

__all__ = ["SyncLoop"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Pace of the loop when nothing wakes it.
LOOP_SECONDS = 0.05
#: Heartbeat period of a node with nothing to do, so that it sees the job finish soon.
IDLE_HEARTBEAT_SECONDS = 0.1
#: A node looks for new control commands at least this often (pause within a second).
CONTROL_CHECK_SECONDS = 0.5
#: While Redis stays unreachable, the node says so this often.
OUTAGE_LOG_SECONDS = 60.0
#: Batches of new requests sent per round at most (then heartbeat and lease).
FLUSHES_PER_ROUND = 2
#: How long close() keeps trying to hand its last batch to an unreachable Redis.
CLOSE_FLUSH_SECONDS = 60.0
#: How long close() waits for failures on their way to the error registry (the
#: registry's writer tries a state DB that does not answer again every 5 s).
CLOSE_RECORD_SECONDS = 10.0
#: A node that queued a retry with a delay reclaims it this long after its time (its
#: clock and Redis's differ by a round trip).
WAITING_REACH_SECONDS = 0.01


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class SyncLoop:
    """Keeps *ledger* in step with *frontier* for node *node_id*."""

    def __init__(
        self,
        *,
        frontier: FrontierBackend,
        ledger: Ledger,
        steering: Steering,
        lifecycle: Lifecycle,
        config: FrontierConfig,
        redis_config: RedisConfig,
        node_id: str,
        sites: SiteKeyer,
        engine: EngineHooks,
        stats: NodeStats,
        fingerprint: Callable[[Request], bytes],
        status: Callable[[], dict[str, Any]],
    ) -> None:
        self.frontier = frontier
        self.ledger = ledger
        self.steering = steering
        self.lifecycle = lifecycle
        self.config = config
        self.redis_config = redis_config
        self.node_id = node_id
        self.sites = sites
        self.engine = engine
        self.stats = stats
        #: the frontier's fingerprint of a request (FINGERPRINT_BYTES long)
        self.fingerprint = fingerprint
        self.status = status
        self.spider: Spider | None = None
        #: items waiting for the item stores (the stores register with it)
        self.backlog = Backlog(config.items_pending_max)
        #: the backlog is over its bound: no lease, nothing handed to the engine
        self.waiting_for_store = False
        self._said_store_wait = False  # a store that is down was named in a WARNING
        #: when and how much to lease (its ``budgets``: the configured limits with the
        #: fleet's run-time limits over them, and the job's own)
        self.leaser = Leaser(
            frontier=frontier,
            ledger=ledger,
            steering=steering,
            config=config,
            node_id=node_id,
            engine=engine,
            stats=stats,
            backlog=self.backlog,
        )
        self.backoff = Backoff(redis_config.retry_min_seconds, redis_config.retry_max_seconds)
        self.outage = Outage("Redis", self._waiting, OUTAGE_LOG_SECONDS)
        #: what this node learned about sites (back-off, robots.txt), to send
        self.reports = SiteReports(config.backoff, stats.inc)
        self.seeds = (
            SeedReader(
                frontier,
                config.start_urls_key,
                config.start_urls_batch,
                stats,
                node_id,
                lock_ms=int(config.lease_seconds * 1000),
            )
            if config.start_urls_key
            else None
        )
        lifecycle.seed_key = config.start_urls_key
        self.state: JobState | None = None
        self._limits_raw: tuple[dict[str, str], dict[str, str]] = ({}, {})
        self._task: asyncio.Task[None] | None = None
        self._opened = False
        # waking the loop: a future it sleeps on, resolved by kick(); a kick while it
        # is busy is remembered so that its next sleep returns at once
        self._waiter: asyncio.Future[None] | None = None
        self._waiter_wakes_on_work = True
        self._kicked = False
        self._next_heartbeat = 0.0
        self._next_reclaim = 0.0
        self._last_flush = 0.0
        self._was_idle = False  # at the last heartbeat
        self._control_seq = -1  # the job's newest command known (-1: not read yet)
        self._next_control_check = 0.0
        self._logged_dup = False
        #: requests handed in by feed(), committed by the loop in order
        self._feeds: list[tuple[list[tuple[Request, Outgoing]], asyncio.Future[int]]] = []
        #: requests of the first feed queued by a commit done in part (PartialCommit)
        self._fed_before = 0
        #: reasons the job must not count as finished for this node (see hold())
        self.holds: set[str] = set()
        #: makes the error registry's writer write at once (set by the registry)
        self.flush_records: Callable[[], None] = lambda: None

    # -- start and stop --------------------------------------------------------------
    async def open(self, spider: Spider | None) -> None:
        """Join the job and start the loop. Redis is tried for CRAWLFLEET_REDIS_START_TIMEOUT
        (retrying with back-off); then RedisUnreachable, saying where and why (the loop
        is not started; :meth:`close` then has nothing to hand back)."""
        self.spider = spider
        self.leaser.codec = RequestCodec(spider)
        self._opened = True
        limit = self.redis_config.start_timeout_seconds
        try:
            await until_reachable(
                "open the frontier", self.frontier.register_job, self.backoff, give_up_after=limit
            )
        except GaveUp as exc:
            where = redact(self.redis_config.url) or "the embedded Redis"
            raise RedisUnreachable(
                f"Redis at {where} unreachable for {exc.seconds:.1f}s at start, giving up "
                f"(CRAWLFLEET_REDIS_START_TIMEOUT = {limit:g}): {exc}"
            ) from None
        self._task = asyncio.ensure_future(self._run())

    async def close(self, reason: str, summary: Callable[[str], dict[str, Any]]) -> None:
        """Stop the loop, hand everything back or in, leave the registry, keep the
        node's *summary* (bounded by CLOSE_FLUSH_SECONDS while Redis is unreachable)."""
        self.lifecycle.closing = True
        self.kick(closing=True)
        if self._task is None:
            return  # never reached Redis (or never opened): nothing held, nothing to say
        await self._task
        self._collect_finished()
        await self._await_records()
        ledger = self.ledger
        ledger.abandon_handed()
        unstored = self.stats.get("crawlfleet/frontier/unstored")
        if unstored:
            logger.warning(
                "%d pages whose items could not be stored before the stop go back to the "
                "frontier (crawled again later)",
                unstored,
            )
        deadline = time.monotonic() + CLOSE_FLUSH_SECONDS
        self.backoff.reset()
        while time.monotonic() < deadline:
            try:
                while ledger.unsent:
                    await self._flush()
                await self._release_given_back()
                held = list(ledger.held.items())
                if held:
                    back = await self.frontier.release(self.node_id, held)
                    self.stats.inc("crawlfleet/frontier/released", back)
                ledger.held.clear()
                ledger.buffer.clear()
                await self._heartbeat(leaving=True)
                await self.frontier.save_summary(self.node_id, summary(reason))
                break
            except REDIS_ERRORS as exc:
                delay = self.backoff.next()
                logger.warning(
                    "Redis unreachable while closing (%s); retrying in %.1fs",
                    redact(str(exc)),
                    delay,
                )
                await asyncio.sleep(delay)
        else:
            logger.error(
                "Could not reach Redis for %.0fs while closing: %d new requests were not "
                "queued; %d leases will return to their queues when they expire",
                CLOSE_FLUSH_SECONDS,
                len(ledger.out),
                len(ledger.held),
            )
            self.stats.set("crawlfleet/node/unfinished", len(ledger.out) + len(ledger.held))
        self.stats.set("crawlfleet/redis/round_trips", self.frontier.round_trips)
        self._cache_stats()

    def _cache_stats(self) -> None:
        seen = self.ledger.seen
        self.stats.set("crawlfleet/seen_cache/lookups", seen.lookups)
        self.stats.set("crawlfleet/seen_cache/hits", seen.hits)
        self.stats.set("crawlfleet/seen_cache/size", len(seen))

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
        """The leased requests this node holds are at most half its prefetch."""
        return self.leaser.low()

    # -- the loop --------------------------------------------------------------------
    async def _run(self) -> None:
        while not self.lifecycle.closing:
            began = time.monotonic()  # an outage counts from the round that failed
            try:
                await self._tick()
                self.outage.succeeded(lambda: f"{len(self.ledger.out)} new requests waited locally")
                self.backoff.reset()
            except REDIS_ERRORS as exc:
                self.stats.inc("crawlfleet/redis/errors")
                self.outage.failed(exc, began)
                await self._sleep(self.backoff.next(), wake_on_work=False)
                continue
            except Exception:
                logger.exception("crawlfleet sync loop failed; retrying in 1s")
                await self._sleep(1.0)
                continue
            await self._sleep(self._pause_seconds())

    def _waiting(self) -> str:
        return (
            f"{len(self.ledger.out)} new requests and {len(self.ledger.acks)} finished ones "
            "wait locally"
        )

    def _pause_seconds(self) -> float:
        """How long the loop sleeps unless woken: LOOP_SECONDS, or until the next lease
        when that is sooner (a rate-limited site's next slot opens) and work is wanted."""
        if self.low() and self.steering.state == "running":
            return min(LOOP_SECONDS, max(0.0, self.leaser.next_at - time.monotonic()))
        return LOOP_SECONDS

    async def _sleep(self, seconds: float, *, wake_on_work: bool = True) -> None:
        """Wait *seconds*, or less when woken (new work, closing). While Redis is
        unreachable (*wake_on_work* False) only closing cuts the back-off short."""
        if self.lifecycle.closing or (self._kicked and wake_on_work):
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

    def _flush_due(self, now: float) -> bool:
        """Send a batch when it is full, when it has waited CRAWLFLEET_FLUSH_SECONDS, or
        at once when it holds new requests and the buffer runs low while the job has
        little queued (this node, or another, may be waiting for exactly that work) or
        when the node has nothing left in hand. (Each commit costs Redis a script call
        however small: with plenty queued, batches wait for their time.)"""
        ledger = self.ledger
        if not ledger.unsent:
            return False
        if len(ledger.out) >= self.config.flush_batch:
            return True
        if ledger.out and self.low() and not self.leaser.plenty():
            return True
        if not (ledger.buffer or ledger.slotted or ledger.handed):
            return True  # nothing left in hand: the job may be finishing
        return now - self._last_flush >= self.config.flush_seconds

    async def _tick(self) -> None:
        self._collect_finished()
        self._watch_stores()
        await self._release_given_back()
        if not self._was_idle and self.locally_idle():
            # just ran out of work: say so now, the job may be finished
            self._next_heartbeat = 0.0
        # a bounded number of batches per round: a spider that yields requests faster
        # than they are sent (a long start()) must not keep the node from leasing work
        for _ in range(FLUSHES_PER_ROUND):
            if not self._flush_due(time.monotonic()):
                break
            await self._flush()
        now = time.monotonic()
        if now >= self._next_control_check and now < self._next_heartbeat:
            self._note_control_seq(await self.frontier.control_seq())
        if now >= self._next_heartbeat:
            await self._heartbeat()
        if now >= self._next_reclaim:
            self._next_reclaim = now + self.config.reclaim_seconds
            back = await self.frontier.reclaim_expired(
                grace_ms=int(self.config.node_timeout_seconds * 1000)
            )
            due, self.frontier.came_due = self.frontier.came_due, 0
            if back:
                logger.info(
                    "Returned %d leases (expired, or held by a dead node) to their queues", back
                )
                self.stats.inc("crawlfleet/frontier/reclaimed", back)
            if due:
                self.stats.inc("crawlfleet/frontier/retries_due", due)
            if back or due:
                self.leaser.work_arrived()
        if self.steering.state != "running":
            if self.steering.state == "draining" and self.locally_idle():
                self.lifecycle.close_once("drained")
        elif self.low() and now >= self.leaser.next_at:
            seq = await self.leaser.lease()
            if seq is not None:
                self._note_control_seq(seq)
        if self._feeds:
            await self._commit_feeds()
        if self.seeds is not None and now >= self.seeds.next_at:
            await self.seeds.pull(self._seed_outbound, self._queue_now, self.leaser.idle_delay)
        if self.reports:
            robots_read = bool(self.reports.robots)
            await self.reports.send(self.frontier)
            if self.leaser.offer or robots_read:
                # a robots.txt just read frees its site: lease now, not when the probe
                # would have ended (up to ROBOTS_PROBE_MS later)
                self.leaser.now()

    def locally_idle(self) -> bool:
        """This node holds nothing and the engine reads no start requests."""
        return not (self.ledger.busy or self.engine.starting())

    def _watch_stores(self) -> None:
        """Once too many items wait for the item stores, take no more work (a crash now
        fetches again only the pages of those items and the ones in flight); while a
        store is down, give back the requests held ready too. Go on once they are
        written."""
        over = self.backlog.over()
        down = self.backlog.down() if over else []
        if down:
            if self.ledger.ready:
                self.ledger.release.extend(self.ledger.drain_ready())
            if not self._said_store_wait:
                self._said_store_wait = True
                logger.warning(
                    "Item store %s is unreachable and %d items wait for it "
                    "(CRAWLFLEET_ITEMS_PENDING_MAX %d): node %s is waiting for the item "
                    "store, taking no work until they are written",
                    ", ".join(store.target for store in down),
                    self.backlog.waiting(),
                    self.backlog.limit,
                    self.node_id,
                )
        if over == self.waiting_for_store:
            return
        self.waiting_for_store = over
        self._next_heartbeat = 0.0  # the status says so at once
        if over:
            self.stats.inc("crawlfleet/node/store_waits")
            if not down:  # a store slower than the crawl: back-pressure, for a moment
                logger.debug(
                    "%d items wait for the item stores (CRAWLFLEET_ITEMS_PENDING_MAX %d): "
                    "node %s takes no work until they are written",
                    self.backlog.waiting(),
                    self.backlog.limit,
                    self.node_id,
                )
            return
        if self._said_store_wait:
            self._said_store_wait = False
            logger.info("Items written: node %s takes work again", self.node_id)
        self.leaser.work_arrived()
        self.engine.wake()

    # -- finished requests -------------------------------------------------------------
    def _collect_finished(self) -> None:
        """Requests the engine no longer has in progress are finished: acknowledge."""
        if not self.ledger.handed:
            return
        inprogress = self.engine.inprogress()
        if inprogress is None:
            return  # no engine slot (not open yet, or closed): nothing can be known
        self.stats.inc("crawlfleet/frontier/unstored", self.ledger.collect(inprogress))

    async def _await_records(self) -> None:
        """At close: wait (up to CLOSE_RECORD_SECONDS) for the failures of finished
        requests to be recorded; give back the requests whose failures are not."""
        ledger = self.ledger
        if not ledger.recorded:
            return
        logger.info(
            "Waiting up to %.0fs for %d failure(s) to be written to the error registry",
            CLOSE_RECORD_SECONDS,
            len(ledger.recorded),
        )
        self.flush_records()
        now = time.monotonic()
        deadline, beat = now + CLOSE_RECORD_SECONDS, now + self.config.heartbeat_seconds
        while ledger.recorded and (now := time.monotonic()) < deadline:
            if now >= beat:  # the loop is stopped: keep the node and its leases alive
                beat = now + self.config.heartbeat_seconds
                await self._keep_alive()
            await asyncio.sleep(LOOP_SECONDS)
        given = ledger.give_back_recorded()
        if given:
            logger.warning(
                "%d requests whose failures could not be written to the error registry "
                "before the stop go back to the frontier (crawled again later)",
                given,
            )
            self.stats.inc("crawlfleet/errors/unwritten", given)

    async def _keep_alive(self) -> None:
        """A heartbeat that renews the node's leases and nothing else (at close)."""
        try:
            await self.frontier.heartbeat(
                self.node_id,
                ttl_ms=int(self.config.node_timeout_seconds * 1000),
                status=json.dumps(self.status(), default=str),
                busy=True,
                lease_ms=int(self.config.lease_seconds * 1000),
                renew=list(self.ledger.held),
            )
        except REDIS_ERRORS as exc:  # the leases may lapse: their pages are crawled again
            logger.debug("Heartbeat while closing failed: %s", redact(str(exc)))

    async def _release_given_back(self) -> None:
        """Release the leases given back (unstored pages, missed slots)."""
        ledger = self.ledger
        if ledger.release:
            given, ledger.release = ledger.release, []
            try:
                back = await self.frontier.release(self.node_id, given)
            except BaseException:
                ledger.release[:0] = given  # tried again next round
                raise
            self.stats.inc("crawlfleet/frontier/released", back)

    # -- new requests ------------------------------------------------------------------
    async def _flush(self) -> None:
        ledger = self.ledger
        batch = ledger.out[: self.config.flush_batch]
        # acknowledgements travel with or after the requests their pages produced
        send_acks = len(batch) == len(ledger.out)
        acks = list(ledger.acks) if send_acks else []
        bad = list(ledger.bad)
        for request, _fp, _payload, _delay in batch:
            if self.sites.needs_resolving(request):
                await self.sites.resolve(self.sites.host(request))
        outgoing = [
            Outgoing(fp, self.sites.site(request), request.priority, payload, delay)
            for request, fp, payload, delay in batch
        ]
        seen = ledger.seen
        try:
            result = await self.frontier.commit(
                self.node_id, outgoing, acks, bad, known=len(ledger.known), epoch=seen.epoch
            )
        except PartialCommit as part:
            # some shards took their part: only the rest is sent again (requests that
            # bypass the seen-filter must not be queued twice)
            self._committed(batch, part.result)
            self._settle_known(part.result, [fp for _r, fp, *_rest in batch])
            ledger.out[: len(batch)] = [e for i, e in enumerate(batch) if i not in part.requests]
            ledger.acks[:] = [rid for rid in ledger.acks if rid not in part.acks]
            raise
        delays = [delay for *_rest, delay in batch if delay > 0]
        if delays:  # reclaim them (with any other due lease) once the first one is due
            due = time.monotonic() + min(delays) / 1000 + WAITING_REACH_SECONDS
            self._next_reclaim = min(self._next_reclaim, due)
        self._last_flush = time.monotonic()
        del ledger.out[: len(batch)]
        if send_acks:
            del ledger.acks[: len(acks)]
        del ledger.bad[: len(bad)]
        self._committed(batch, result)
        self._settle_known(result, [fp for _r, fp, *_rest in batch])

    def _committed(self, batch: list[Outbound], result: CommitResult) -> None:
        """Count what a commit of *batch* (ledger entries) did."""
        self.stats.inc("crawlfleet/frontier/queued", result.queued)
        self.stats.inc("crawlfleet/frontier/acked", result.acked)
        if result.queued:
            self.leaser.work_arrived()
        for i in result.duplicate_indexes:
            request = batch[i][0]
            self.count_duplicate(request)
            self.engine.dropped(request)

    def _settle_known(self, result: CommitResult, committed: list[bytes]) -> None:
        """Settle the duplicates the seen cache found (``ledger.known``) with what a
        commit (of the fingerprints *committed*) says of the job's epoch: counted by it,
        they are duplicates; if the job was reset since the cache learned them, the cache
        starts over and they are sent after all."""
        ledger, seen = self.ledger, self.ledger.seen
        if not result.epoch:
            return  # not read (a sharded commit without shard 0): they wait
        if seen.epoch and result.epoch != seen.epoch:
            stale, ledger.known = ledger.known, []
            seen.clear(result.epoch)
            for fp in committed:  # in the filter of this epoch now
                seen.add(fp)
            logger.warning(
                "Job %s was reset while this node ran: its cache of seen fingerprints "
                "starts over, %d requests it held for duplicates are sent",
                self.config.job,
                len(stale),
            )
            for request in stale:
                request.meta.pop(DELAY_META, None)  # a back-off is not kept across a reset
                try:
                    payload = self.leaser.codec.encode(request)
                except SerializationError as exc:
                    logger.error("Dropped request: %s", exc, extra={"spider": self.spider})
                    continue
                ledger.add_out(request, self.fingerprint(request), payload)
            return
        if not seen.epoch:
            seen.epoch = result.epoch  # the first commit: the next one counts them
            return
        confirmed = ledger.known[: result.known_counted]
        del ledger.known[: result.known_counted]
        for request in confirmed:  # the scheduler said "dropped" to the engine already
            self.count_duplicate(request)

    def feed(self, requests: list[Request]) -> asyncio.Future[int]:
        """Queue *requests* in the frontier from outside the engine (a campaign's units):
        encoded now (SerializationError raised here), committed by the loop, in order,
        retried while Redis fails; the future gives how many were new (not seen)."""
        pairs = []
        for request in requests:
            payload = self.leaser.codec.encode(request)
            fp = b"" if request.dont_filter else self.fingerprint(request)
            pairs.append((request, Outgoing(fp, "", request.priority, payload)))
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._feeds.append((pairs, done))
        self.kick()
        return done

    async def _commit_feeds(self) -> None:
        while self._feeds:
            pairs, done = self._feeds[0]
            outgoing = []
            for request, out in pairs:
                if self.sites.needs_resolving(request):
                    await self.sites.resolve(self.sites.host(request))
                outgoing.append(
                    Outgoing(out.fp, self.sites.site(request), out.priority, out.payload)
                )
            try:
                result = await self.frontier.commit(
                    self.node_id, outgoing, epoch=self.ledger.seen.epoch
                )
            except PartialCommit as part:  # sent again: only what was not done
                self._feeds[0] = ([p for i, p in enumerate(pairs) if i not in part.requests], done)
                self._fed_before += part.result.queued
                raise
            self._feeds.pop(0)
            self._settle_known(result, [out.fp for out in outgoing])
            queued, self._fed_before = result.queued + self._fed_before, 0
            if queued:
                self.leaser.work_arrived()
            if not done.done():
                done.set_result(queued)

    def count_duplicate(self, request: Request) -> None:
        """*request* was a duplicate (known here, or to the shared seen-filter)."""
        self.stats.inc("crawlfleet/scheduler/duplicates")
        self.stats.inc("dupefilter/filtered")
        if not self._logged_dup:
            logger.debug(
                "Filtered duplicate request: %(request)s - no more duplicates will be shown",
                {"request": request},
                extra={"spider": self.spider},
            )
            self._logged_dup = True

    def _seed_outbound(self, raw: bytes) -> list[Outbound]:
        """The requests of seed entry *raw*, ready to queue: each through the seen-filter
        (a scrapy-redis spider's seeds are dont_filter: a seed read again after a crash,
        or linked from a page, must not be fetched twice)."""
        return [
            (request, self.fingerprint(request), self.leaser.codec.encode(request), 0)
            for request in requests_from_seed(self.spider, raw)
        ]

    async def _queue_now(self, outgoing: list[Outbound]) -> None:
        self.ledger.out.extend(outgoing)
        while self.ledger.out:
            await self._flush()

    # -- heartbeat, limits, control --------------------------------------------------------
    async def _heartbeat(self, *, leaving: bool = False) -> None:
        idle = self.locally_idle()
        status = "leaving" if leaving else json.dumps(self.status(), default=str)
        state = await self.frontier.heartbeat(
            self.node_id,
            ttl_ms=int(self.config.node_timeout_seconds * 1000),
            status=status,
            busy=not idle,
            lease_ms=int(self.config.lease_seconds * 1000),
            renew=list(self.ledger.held),
        )
        self.state = state
        self.leaser.job_queued, self.leaser.live_nodes = state.queued, state.live_nodes
        self._cache_stats()
        if not leaving:
            self._refresh_limits(state.limits, state.fleet_limits)
            await self._apply_control(state.control)
        now = time.monotonic()
        fast = idle and self.config.close_when_finished
        self._next_heartbeat = now + (
            min(IDLE_HEARTBEAT_SECONDS, self.config.heartbeat_seconds)
            if fast
            else self.config.heartbeat_seconds
        )
        self._was_idle = idle
        if state.queued > 0 and not self.ledger.ready:
            self.leaser.now()
        seeds = self.seeds
        waiting = bool(self.holds or self._feeds) or (seeds is not None and seeds.waiting)
        read_at = seeds.read_at if seeds is not None else math.inf
        self.lifecycle.update(state, idle, waiting, now, read_at)
        since = self.lifecycle.empty_since
        if seeds is not None and since is not None and read_at < since:
            # the job looks finished: read the seed key once more first (seeds pushed
            # since the last read must not be left behind)
            seeds.next_at = 0.0

    def _note_control_seq(self, seq: int) -> None:
        """The job's command sequence as just read: a new command is read (with a
        heartbeat) at once."""
        self._next_control_check = time.monotonic() + CONTROL_CHECK_SECONDS
        if seq != self._control_seq:
            if self._control_seq >= 0:
                self._next_heartbeat = 0.0
            self._control_seq = seq

    def _refresh_limits(self, own: dict[str, str], fleet: dict[str, str]) -> None:
        """Take the run-time limits read with the heartbeat: the fleet's over the
        configured ones (budgets every job shares), and the job's own."""
        if (own, fleet) == self._limits_raw:
            return
        self._limits_raw = (own, fleet)
        margin = self.config.rate_limit_margin
        self.leaser.budgets = Budgets(
            self.config.rate_limits.merged(_valid_limits(fleet, "the fleet's", margin)),
            _valid_limits(own, f"job {self.config.job!r}'s own", margin),
            self.config.budget_scope,
            self.config.job,
        )
        logger.info(
            "Rate limits now: fleet %s, own (job %s) %s",
            fleet or "as configured",
            self.config.job,
            own or "none",
        )

    async def _apply_control(self, wanted: Desired) -> None:
        before = self.steering.state
        resized, state = self.steering.take(wanted)
        if resized:
            logger.info("Control: concurrency ceiling now %d", self.steering.ceiling)
            self.apply_concurrency()
        if state is None:
            return
        lift = f" (`crawlfleet control resume {self.config.job}` lifts it)"
        if "campaign" in self.holds:  # a campaign's pause: resume the campaign, not the job
            lift = " (`crawlfleet campaign resume NAME` lifts it)"
        logger.info(
            "Control: node %s %s -> %s%s",
            self.node_id,
            before,
            state,
            "" if state == "running" else lift,
        )
        if state in ("paused", "stopped"):
            held = self.ledger.drain_ready()
            if held:
                back = await self.frontier.release(self.node_id, held)
                self.stats.inc("crawlfleet/frontier/released", back)
        if state == "stopped":
            self.lifecycle.close_once("stopped")
        elif state == "running":
            self.leaser.now()
            self.engine.wake()

    def apply_concurrency(self) -> None:
        """The steering's concurrency changed: resize the downloader, lease for it."""
        self.engine.set_concurrency(self.steering.concurrency)
        self.kick_for_work()


def _valid_limits(raw: dict[str, str], whose: str, margin: float) -> RateLimits:
    """The run-time limits *raw* that parse; each bad one is logged and skipped."""

    def skipped(pattern: str, spec: str, exc: ConfigError) -> None:
        logger.error("Ignoring %s rate limit %r = %r: %s", whose, pattern, spec, exc)

    return RateLimits.lenient(raw, margin=margin, skipped=skipped)
