"""The crawlfleet scheduler: Scrapy's scheduler interface on the shared Redis frontier.

``enqueue_request()`` and ``next_request()`` never wait on Redis. They work on local
buffers; a background task on the reactor's asyncio loop does all Redis traffic in
batches:

- new requests (and the acknowledgements of finished ones) go out in one ``commit``
  script per batch, which checks the seen-filter and queues atomically;
- the local buffer is refilled with leased requests, sized to free capacity;
- a heartbeat renews this node's leases and reads the job's state; any node returns
  expired leases to their queues.

A request handed to the engine is acknowledged only once the engine has finished with
it (downloaded, parsed, its new requests buffered, its items through the pipelines,
where the stores return only once an item is durable), and in the same batch as, or
after, those new requests: a node killed at any moment loses nothing, its leases come
back once it misses its heartbeats (or they expire). A request one of whose items a
store gave up (ItemNotDurable: stopping while the store is down) is not acknowledged
but released, back to its queue.

The heartbeat also brings the operator's control commands (pause, resume, drain, stop,
concurrency: crawlfleet.frontier.control); the node runs the lower of that concurrency
ceiling and the feedback controller's limit (crawlfleet.node.feedback), and keeps a
prefetch buffer to match, so it never holds more leased work than it can start soon.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from scrapy import Request, Spider, signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.crawler import Crawler
from scrapy.settings import BaseSettings
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.reactor import is_asyncio_reactor_installed
from twisted.internet.defer import Deferred

from crawlfleet import __version__
from crawlfleet.exceptions import ConfigError, ItemNotDurable, MalformedEntry, SerializationError
from crawlfleet.frontier.client import Frontier, JobState, Outgoing, SeenConfig
from crawlfleet.frontier.control import Desired
from crawlfleet.frontier.engine import EngineHooks, engine_hooks
from crawlfleet.frontier.limits import LATE_SHARE, RateLimits
from crawlfleet.frontier.reports import SiteReports
from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.frontier.sites import SiteKeyer
from crawlfleet.frontier.slots import SlotQueue
from crawlfleet.frontier.steering import Steering
from crawlfleet.redis.connection import REDIS_ERRORS, redact, shared_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.settings.config import FrontierConfig, RedisConfig
from crawlfleet.spiders.seeding import parse_seed

__all__ = ["Scheduler", "new_node_id", "status_providers"]

logger = logging.getLogger(__name__)

FINGERPRINT_BYTES = 16
#: Fingerprints this node has sent, kept to drop repeats without a Redis round trip
#: (about 100 bytes each; the set starts over when full).
LOCAL_SEEN_MAX = 200_000
#: Pace of the background loop when nothing wakes it.
LOOP_SECONDS = 0.05
#: Heartbeat period of a node with nothing to do, so that it sees the job finish soon.
IDLE_HEARTBEAT_SECONDS = 0.1
#: A node looks for new control commands at least this often (pause within a second).
CONTROL_CHECK_SECONDS = 0.5
#: While Redis stays unreachable, the node says so this often.
OUTAGE_LOG_SECONDS = 60.0
#: A node waiting for a job's first seed says so this often.
NO_WORK_LOG_SECONDS = 60.0
#: Batches of new requests sent per loop round at most (then heartbeat and lease).
FLUSHES_PER_ROUND = 2
#: Longest wait between lease attempts while other nodes hold leases.
BUSY_POLL_MAX_SECONDS = 0.2
#: With ROBOTSTXT_OBEY, a site whose robots.txt no node has read yet gives one request
#: per this long (crawlfleet.frontier.throttle.ROBOTS_PROBE_SECONDS).
ROBOTS_PROBE_MS = 10_000
#: Slots of rate-limited sites are leased at most this far ahead (a node that dies
#: holding them wastes at most this much of a budget).
SLOT_HORIZON_SECONDS = 0.5
#: Scrapy's middleware that reads robots.txt (the probe needs it to end).
ROBOTS_MIDDLEWARE = "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"
#: How long close() keeps trying to hand its last batch to an unreachable Redis.
CLOSE_FLUSH_SECONDS = 60.0


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def status_providers(crawler: Crawler) -> list[Callable[[], dict[str, Any]]]:
    """The crawler's list of node-status providers (created on first use). An extension
    appends a callable returning a JSON-able dict; the scheduler publishes the merged
    dicts with every heartbeat."""
    providers: list[Callable[[], dict[str, Any]]] | None = getattr(
        crawler, "crawlfleet_status_providers", None
    )
    if providers is None:
        providers = []
        crawler.crawlfleet_status_providers = providers  # type: ignore[attr-defined]
    return providers


def robots_probe_ms(settings: BaseSettings) -> int:
    """ROBOTS_PROBE_MS when the node obeys robots.txt and Scrapy's middleware that
    reads it is on (else a probe would never end), otherwise 0."""
    middlewares = settings.getwithbase("DOWNLOADER_MIDDLEWARES")
    if settings.getbool("ROBOTSTXT_OBEY") and middlewares.get(ROBOTS_MIDDLEWARE) is not None:
        return ROBOTS_PROBE_MS
    return 0


def new_node_id() -> str:
    """host-pid-random: unique per process, readable in status listings."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Scheduler(BaseScheduler):
    """A Scrapy scheduler whose queue is one job's shared frontier in Redis."""

    def __init__(
        self,
        *,
        client: Redis,
        config: FrontierConfig,
        redis_config: RedisConfig,
        fingerprint: Callable[[Request], bytes],
        stats: Any = None,
        node_id: str | None = None,
        concurrency: int = 16,
    ) -> None:
        self.config = config
        self.redis_config = redis_config
        self.node_id = node_id or new_node_id()
        self.frontier = Frontier(
            client,
            JobKeys.of(redis_config.key_prefix, config.job),
            SeenConfig(config.seen_mode, config.bloom_capacity, config.bloom_error_rate),
        )
        self.fingerprint = fingerprint
        self.stats = stats
        #: state and concurrency, as control commands and the feedback set them
        self.steering = Steering(concurrency, config.prefetch)
        #: > 0 when the node obeys robots.txt: see crawlfleet.frontier.throttle
        self.robots_probe_ms = 0
        #: the worst event-loop lag of the last feedback interval (set by the feedback
        #: controller): a lagging node's latencies say more about it than about sites
        self.loop_lag_ms = 0.0
        self.sites = SiteKeyer(config.site_key)
        self.codec = RequestCodec(None)
        self.spider: Spider | None = None
        #: hooks into the engine, set by from_crawler (no-ops without a crawler)
        self.engine = EngineHooks()
        #: callables whose dicts are merged into the node status of each heartbeat; the
        #: crawler's list ``crawler.crawlfleet_status_providers`` (extensions add to it)
        self.status_providers: list[Callable[[], dict[str, Any]]] = []

        self._out: list[tuple[Request, bytes, bytes]] = []  # request, fingerprint, payload
        self._sent: set[bytes] = set()  # fingerprints this node has queued
        self.limits: RateLimits = config.rate_limits
        self._limits_raw: dict[str, str] = {}
        self._acks: list[str] = []
        self._bad: list[str] = []
        self._buffer: deque[tuple[Request, str]] = deque()  # leased, not yet handed out
        #: leased requests of rate-limited sites, until their send time
        self._slotted: SlotQueue[tuple[Request, str]] = SlotQueue(self._slot_due)
        self._handed: dict[Request, str] = {}  # handed to the engine, not finished
        #: handed requests with an item a store gave up: released, not acknowledged
        self._unstored: set[Request] = set()
        self._release: list[tuple[str, str]] = []  # (rid, site) to give back
        self._held: dict[str, str] = {}  # rid -> site of every lease this node holds
        self._offer: list[str] = []
        self._state: JobState | None = None
        self._empty_since: float | None = None
        self._finished = False
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        # waking the background loop: a future it sleeps on, resolved by _kick(); a
        # kick while it is busy is remembered so that its next sleep returns at once
        self._waiter: asyncio.Future[None] | None = None
        self._waiter_wakes_on_work = True
        self._kicked = False
        self._opened = False
        self._next_heartbeat = 0.0
        self._next_reclaim = 0.0
        self._next_lease = 0.0
        self._await_capacity = False
        self._next_seeds = 0.0
        self._idle_delay = 0.0
        self._last_flush = 0.0
        self._redis_down_since: float | None = None
        self._outage_logged = 0.0
        self._logged_dup = False
        self._seeds_waiting = False
        self._close_asked = False
        self._was_idle = False  # at the last heartbeat
        self._control_seq = -1  # the job's newest command known (-1: not read yet)
        self._next_control_check = 0.0
        self._next_no_work_log = 0.0
        #: what this node learned about sites (back-off, robots.txt), to send
        self.reports = SiteReports(config.backoff, self._inc)
        self._started = time.time()

    # -- construction -----------------------------------------------------------------
    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Scheduler:
        if not is_asyncio_reactor_installed():
            raise ConfigError(
                "crawlfleet needs TWISTED_REACTOR = "
                "'twisted.internet.asyncioreactor.AsyncioSelectorReactor'"
            )
        settings = crawler.settings
        spider_name = crawler.spider.name if crawler.spider else ""
        config = FrontierConfig.from_settings(settings, spider_name)
        redis_config = RedisConfig.from_settings(settings)
        assert crawler.request_fingerprinter is not None
        scheduler = cls(
            client=shared_client(crawler, redis_config),
            config=config,
            redis_config=redis_config,
            fingerprint=crawler.request_fingerprinter.fingerprint,
            stats=crawler.stats,
            concurrency=settings.getint("CONCURRENT_REQUESTS"),
        )
        scheduler._bind_engine(crawler)
        crawler.signals.connect(scheduler.item_dropped, signal=signals.item_dropped)
        scheduler.robots_probe_ms = robots_probe_ms(settings)
        #: extensions (the feedback controller) find the scheduler here
        crawler.crawlfleet_scheduler = scheduler  # type: ignore[attr-defined]
        return scheduler

    def _bind_engine(self, crawler: Crawler) -> None:
        self.engine = engine_hooks(crawler)
        self.status_providers = status_providers(crawler)

    # -- Scrapy's scheduler interface -------------------------------------------------
    def open(self, spider: Spider) -> Deferred[None]:
        self.spider = spider
        self.codec = RequestCodec(spider)
        return deferred_from_coro(self._open())

    async def _open(self) -> None:
        self._opened = True
        await self._until_reachable("open the frontier", self.frontier.register_job)
        logger.info(
            "crawlfleet node %s on job %r (seen-filter: %s, site key: %s, prefetch: %d)",
            self.node_id,
            self.config.job,
            self.config.seen_mode,
            self.config.site_key,
            self.config.prefetch,
        )
        self._task = asyncio.ensure_future(self._run())

    def close(self, reason: str) -> Deferred[None]:
        return deferred_from_coro(self._close(reason))

    async def _close(self, reason: str) -> None:
        self._closing = True
        self._kick(closing=True)
        if self._task is not None:
            await self._task
        self._collect_finished()
        # whatever the engine did not finish (only on a forced stop) goes back
        for request, rid in list(self._handed.items()):
            self._buffer.append((request, rid))
        self._handed.clear()
        self._buffer.extend(self._slotted.drain())
        self._unstored.clear()
        unstored = self._stat("crawlfleet/frontier/unstored")
        if unstored:
            logger.warning(
                "%d pages whose items could not be stored before the stop go back to the "
                "frontier (crawled again later)",
                unstored,
            )
        deadline = time.monotonic() + CLOSE_FLUSH_SECONDS
        delay = self.redis_config.retry_min_seconds
        while time.monotonic() < deadline:
            try:
                while self._out or self._acks or self._bad:
                    await self._flush()
                await self._release_given_back()
                held = list(self._held.items())
                if held:
                    back = await self.frontier.release(self.node_id, held)
                    self._inc("crawlfleet/frontier/released", back)
                self._held.clear()
                self._buffer.clear()
                await self._heartbeat(leaving=True)
                await self.frontier.save_summary(self.node_id, self.summary(reason))
                break
            except REDIS_ERRORS as exc:
                logger.warning(
                    "Redis unreachable while closing (%s); retrying in %.1fs", exc, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.redis_config.retry_max_seconds)
        else:
            logger.error(
                "Could not reach Redis for %.0fs while closing: %d new requests were not "
                "queued; %d leases will return to their queues when they expire",
                CLOSE_FLUSH_SECONDS,
                len(self._out),
                len(self._held),
            )
            self._set_stat("crawlfleet/node/unfinished", len(self._out) + len(self._held))
        self._set_stat("crawlfleet/redis/round_trips", self.frontier.round_trips)
        s = self.summary(reason)
        stored = ", ".join(f"{n} {c}" for n, c in s["stored"].items()) or "none"
        logger.info(
            "crawlfleet node %s closed (%s) after %.1fs: %d pages (%.1f/s), %d items, "
            "stored: %s, %d errors; shared state left in place",
            self.node_id,
            reason,
            s["seconds"],
            s["pages"],
            s["pages_per_second"],
            s["items"],
            stored,
            s["errors"],
        )

    def has_pending_requests(self) -> bool:
        if self._buffer or self._slotted or self._out or self._handed or self._acks or self._bad:
            return True
        if not self.config.close_when_finished or self.steering.state != "running":
            return True  # paused: wait; draining, stopped: the node closes itself
        return not self._finished

    def enqueue_request(self, request: Request) -> bool:
        once = self.config.start_requests_once and request.meta.get("is_start_request")
        try:
            if request.dont_filter and not once:
                fp = b""
            else:
                fp = self.fingerprint(request)[:FINGERPRINT_BYTES]
                if fp in self._sent:
                    # this node already sent it: the shared filter has it (or will, in
                    # the batch on its way), so it is a duplicate without asking Redis
                    self._count_duplicate(request)
                    return False
            payload = self.codec.encode(request)
        except SerializationError as exc:
            logger.error("Dropped request: %s", exc, extra={"spider": self.spider})
            self._inc("crawlfleet/scheduler/unserializable")
            return False
        self._out.append((request, fp, payload))
        if fp:
            if len(self._sent) >= LOCAL_SEEN_MAX:
                self._sent.clear()
            self._sent.add(fp)
        self._inc("crawlfleet/scheduler/enqueued")
        if len(self._out) >= self.config.flush_batch:
            self._kick()
        return True

    def next_request(self) -> Request | None:
        if self.steering.state in ("paused", "stopped"):
            return None
        leased: tuple[Request, str] | None = None
        if self._slotted:
            leased, missed = self._slotted.take(asyncio.get_event_loop().time())
            if missed:
                self._give_back_late(missed)
        if leased is None and self._buffer:
            leased = self._buffer.popleft()
        if self._low():
            self._kick_for_work()
        if leased is None:
            if not self._finished and not self._slotted:
                self._inc("crawlfleet/scheduler/starved")
            return None
        request, rid = leased
        self._handed[request] = rid
        self._inc("crawlfleet/scheduler/dequeued")
        return request

    def __len__(self) -> int:
        return len(self._buffer) + len(self._slotted) + len(self._out)

    def _low(self) -> bool:
        """The leased requests this node holds are at most half its prefetch."""
        return len(self._buffer) + len(self._slotted) <= self.steering.prefetch // 2

    def _slot_due(self) -> None:
        """The earliest slot is due: the engine asks for it."""
        self.engine.wake()

    def _give_back_late(self, missed: list[tuple[Request, str]]) -> None:
        """Requests this node could not send in time on their slots: back to their
        queues (another lease gives them a new slot)."""
        for _request, rid in missed:
            self._release.append((rid, self._held.pop(rid, "")))
        self._inc("crawlfleet/scheduler/late", len(missed))
        self._kick()

    # -- background work ----------------------------------------------------------------
    def _kick(self, *, closing: bool = False) -> None:
        """Wake the background loop (or make its next sleep return at once)."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            if closing or self._waiter_wakes_on_work:
                waiter.set_result(None)
        elif self._opened:
            self._kicked = True

    def _kick_for_work(self) -> None:
        """The buffer runs low: wake the loop if it may lease now (not while it backs off
        from an empty job, nor when it is awake anyway)."""
        if self._await_capacity and len(self._handed) < self.steering.concurrency:
            self._await_capacity = False  # a download ended: slots can be used again
            self._next_lease = 0.0
        if time.monotonic() >= self._next_lease and not self._kicked:
            self._kick()

    async def _run(self) -> None:
        delay = self.redis_config.retry_min_seconds
        while not self._closing:
            try:
                await self._tick()
                if self._redis_down_since is not None:
                    logger.warning(
                        "Redis reachable again after %.1fs; %d new requests waited locally",
                        time.monotonic() - self._redis_down_since,
                        len(self._out),
                    )
                    self._redis_down_since = None
                delay = self.redis_config.retry_min_seconds
            except REDIS_ERRORS as exc:
                self._inc("crawlfleet/redis/errors")
                self._log_outage(exc)
                await self._sleep(delay, wake_on_work=False)
                delay = min(delay * 2, self.redis_config.retry_max_seconds)
                continue
            except Exception:
                logger.exception("crawlfleet scheduler loop failed; retrying in 1s")
                await self._sleep(1.0)
                continue
            await self._sleep(self._pause_seconds())

    def _log_outage(self, exc: BaseException) -> None:
        """Say that Redis is unreachable (or hung: a timeout) at once, then once a
        minute while it lasts."""
        now = time.monotonic()
        what = f"{type(exc).__name__}: {redact(str(exc))}"
        if self._redis_down_since is None:
            self._redis_down_since = self._outage_logged = now
            logger.warning(
                "Redis unreachable (%s): the node goes on with what it holds and retries; "
                "%d new requests and %d finished ones wait locally, nothing is lost",
                what,
                len(self._out),
                len(self._acks),
            )
        elif now - self._outage_logged >= OUTAGE_LOG_SECONDS:
            self._outage_logged = now
            logger.warning(
                "Redis still unreachable after %.0fs (%s); %d new requests and %d finished "
                "ones wait locally",
                now - self._redis_down_since,
                what,
                len(self._out),
                len(self._acks),
            )

    def _pause_seconds(self) -> float:
        """How long the loop sleeps unless woken: LOOP_SECONDS, or until the next lease
        when that is sooner (a rate-limited site's next slot opens) and work is wanted."""
        if self._low() and self.steering.state == "running":
            return min(LOOP_SECONDS, max(0.0, self._next_lease - time.monotonic()))
        return LOOP_SECONDS

    async def _sleep(self, seconds: float, *, wake_on_work: bool = True) -> None:
        """Wait *seconds*, or less when woken (new work, closing). While Redis is
        unreachable (*wake_on_work* False) only closing cuts the back-off short."""
        if self._closing or (self._kicked and wake_on_work):
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
        at once when it holds new requests and the buffer runs low (this node, or
        another, may be waiting for exactly that work) or when the node has nothing
        left in hand."""
        if not (self._out or self._acks or self._bad):
            return False
        if len(self._out) >= self.config.flush_batch:
            return True
        if self._out and self._low():
            return True
        if not (self._buffer or self._slotted or self._handed):
            return True  # nothing left in hand: the job may be finishing
        return now - self._last_flush >= self.config.flush_seconds

    async def _tick(self) -> None:
        self._collect_finished()
        await self._release_given_back()
        if not self._was_idle and self._locally_idle():
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
            if back:
                logger.info(
                    "Returned %d leases (expired, or held by a dead node) to their queues", back
                )
                self._inc("crawlfleet/frontier/reclaimed", back)
        if self.steering.state != "running":
            self._finish_draining()
        elif self._low() and now >= self._next_lease:
            await self._lease()
        if self.config.start_urls_key and now >= self._next_seeds:
            await self._pull_seeds()
        if self.reports:
            await self.reports.send(self.frontier)
            if self._offer:
                self._next_lease = 0.0  # a robots.txt just read may free its site

    def _collect_finished(self) -> None:
        """Requests the engine no longer has in progress are finished: acknowledge."""
        if not self._handed:
            return
        inprogress = self.engine.inprogress()
        if inprogress is None:
            return  # no engine slot (not open yet, or closed): nothing can be known
        done = [r for r in self._handed if r not in inprogress]
        for request in done:
            rid = self._handed.pop(request)
            if request in self._unstored:
                self._unstored.discard(request)
                self._release.append((rid, self._held.pop(rid, "")))
                self._inc("crawlfleet/frontier/unstored")
                continue
            self._held.pop(rid, None)
            self._acks.append(rid)

    def item_dropped(self, item: Any, response: Any, exception: BaseException) -> None:
        """``item_dropped`` handler: an item a store gave up (ItemNotDurable) keeps its
        page from being acknowledged."""
        if isinstance(exception, ItemNotDurable):
            request = getattr(response, "request", None)
            if request is not None and request in self._handed:
                self._unstored.add(request)

    async def _release_given_back(self) -> None:
        """Release the leases given back (unstored pages, missed slots)."""
        if self._release:
            given, self._release = self._release, []
            try:
                back = await self.frontier.release(self.node_id, given)
            except BaseException:
                self._release[:0] = given  # tried again next round
                raise
            self._inc("crawlfleet/frontier/released", back)

    async def _flush(self) -> None:
        batch = self._out[: self.config.flush_batch]
        # acknowledgements travel with or after the requests their pages produced
        send_acks = len(batch) == len(self._out)
        acks = list(self._acks) if send_acks else []
        bad = list(self._bad)
        for request, _fp, _payload in batch:
            if self.sites.needs_resolving(request):
                await self.sites.resolve(self.sites.host(request))
        outgoing = [
            Outgoing(fp, self.sites.site(request), request.priority, payload)
            for request, fp, payload in batch
        ]
        result = await self.frontier.commit(self.node_id, outgoing, acks, bad)
        self._last_flush = time.monotonic()
        del self._out[: len(batch)]
        if send_acks:
            del self._acks[: len(acks)]
        del self._bad[: len(bad)]
        self._inc("crawlfleet/frontier/queued", result.queued)
        self._inc("crawlfleet/frontier/acked", result.acked)
        if result.queued:
            self._idle_delay = 0.0
            self._next_lease = 0.0
        for i in result.duplicate_indexes:
            self._duplicate(batch[i][0])

    def _duplicate(self, request: Request) -> None:
        """A request the shared seen-filter rejected (after enqueue_request said yes)."""
        self._count_duplicate(request)
        self.engine.dropped(request)

    def _count_duplicate(self, request: Request) -> None:
        self._inc("crawlfleet/scheduler/duplicates")
        self._inc("dupefilter/filtered")
        if not self._logged_dup:
            logger.debug(
                "Filtered duplicate request: %(request)s - no more duplicates will be shown",
                {"request": request},
                extra={"spider": self.spider},
            )
            self._logged_dup = True

    async def _lease(self) -> None:
        want = self.steering.prefetch - len(self._buffer) - len(self._slotted)
        if want <= 0:
            return
        # slots of rate-limited sites only for what the downloader can start on time
        free = self.steering.concurrency - len(self._handed) - len(self._slotted)
        offer = self._offer or await self.frontier.offer(self.config.lease_sites)
        result = None
        asked = asyncio.get_event_loop().time()
        if offer:
            result = await self.frontier.lease(
                self.node_id,
                want,
                offer,
                lease_ms=int(self.config.lease_seconds * 1000),
                per_site=max(1, math.ceil(want / len(offer))),
                offer_size=self.config.lease_sites,
                intervals=[self.limits.interval_us(site) for site in offer],
                budgets=[site + self.config.budget_scope for site in offer],
                late=[self.limits.late_us(site) for site in offer],
                backoff_half_life_ms=int(self.config.backoff.half_life_seconds * 1000),
                robots_probe_ms=self.robots_probe_ms,
                horizon_us=int(SLOT_HORIZON_SECONDS * 1_000_000),
                late_share=self.config.rate_limit_margin * LATE_SHARE,
                max_slots=max(0, free),
            )
            self._offer = result.offer
            self._note_control_seq(result.control_seq)
            for site in result.backoff_ended:
                logger.info("Back-off of %s is over (it decayed)", site)
        received = asyncio.get_event_loop().time()
        if result is not None and not result.entries and result.ready_in_us >= 0:
            # rate-limited sites only: come back exactly when the first one is ready
            self._next_lease = time.monotonic() + result.ready_in_us / 1_000_000
            return
        if result is not None and not result.entries and free <= 0:
            # no capacity for slots: lease again once a download ends (next_request)
            self._await_capacity = True
            self._next_lease = time.monotonic() + BUSY_POLL_MAX_SECONDS
            return
        if result is None or not result.entries:
            # Nothing to lease. While other nodes hold leases, their pages will bring
            # new links soon: look again within BUSY_POLL_MAX_SECONDS. Only a job with
            # nothing leased backs off up to CRAWLFLEET_IDLE_MAX_SECONDS.
            busy = result is not None and (result.leased > 0 or result.queued > 0)
            cap = BUSY_POLL_MAX_SECONDS if busy else self.config.idle_max_seconds
            self._idle_delay = min(max(self._idle_delay * 2, LOOP_SECONDS), cap)
            self._next_lease = time.monotonic() + self._idle_delay
            return
        self._idle_delay = 0.0
        for entry in result.entries:
            self._held[entry.rid] = entry.site
            try:
                request = self.codec.decode(entry.payload)
            except MalformedEntry as exc:
                logger.error(
                    "Malformed frontier entry %s set aside (job %s): %s",
                    entry.rid,
                    self.config.job,
                    exc,
                )
                self._inc("crawlfleet/frontier/malformed")
                self._held.pop(entry.rid, None)
                self._bad.append(entry.rid)
                continue
            if entry.slot_us is None:
                self._buffer.append((request, entry.rid))
            else:
                # Redis's "now" lies between asking and the reply: counted from the reply,
                # a slot is never early; the time the reply took comes off how late it
                # may be sent
                at = received + entry.slot_us / 1_000_000
                late = entry.late_us / 1_000_000 - (received - asked)
                self._slotted.add(at, late, (request, entry.rid))
        self._inc("crawlfleet/frontier/leased", len(result.entries))
        self.engine.wake()

    def _locally_idle(self) -> bool:
        return not (
            self._buffer
            or self._slotted
            or self._handed
            or self._out
            or self._acks
            or self._bad
            or self.engine.starting()
        )

    def summary(self, reason: str) -> dict[str, Any]:
        """This node's run in figures (logged at close, kept for ``job status``)."""
        stats: dict[str, Any] = self.stats.get_stats() if self.stats is not None else {}
        seconds = max(0.0, time.time() - self._started)
        pages = int(stats.get("response_received_count", 0))
        errors = sum(
            int(v)
            for k, v in stats.items()
            if k.startswith(("spider_exceptions/", "downloader/exception_type_count/"))
            or k == "crawlfleet/frontier/malformed"
        )
        return {
            "node": self.node_id,
            "reason": reason,
            "started": self._started,
            "finished": time.time(),
            "seconds": round(seconds, 2),
            "pages": pages,
            "pages_per_second": round(pages / seconds, 2) if seconds else 0.0,
            "items": int(stats.get("item_scraped_count", 0)),
            "items_dropped": int(stats.get("item_dropped_count", 0)),
            # store name -> items written (the store's log line says where to)
            "stored": {
                k.split("/")[2]: int(v)
                for k, v in sorted(stats.items())
                if k.startswith("crawlfleet/store/") and k.endswith("/written")
            },
            "errors": errors,
            "unstored": int(stats.get("crawlfleet/frontier/unstored", 0)),
        }

    def node_status(self) -> dict[str, Any]:
        """What this node publishes with each heartbeat (``<job>:nodeinfo``): its own
        figures, then those of every provider in ``status_providers``."""
        status: dict[str, Any] = {
            "node": self.node_id,
            "host": socket.gethostname(),
            "ip": self.config.node_ip,
            "pid": os.getpid(),
            "job": self.config.job,
            "spider": getattr(self.spider, "name", ""),
            "version": __version__,
            "started": self._started,
            "buffered": len(self._buffer) + len(self._slotted),
            "in_progress": len(self._handed),
            "held": len(self._held),
            "pages": self._stat("response_received_count"),
            "items": self._stat("item_scraped_count"),
            "done": self._stat("crawlfleet/frontier/acked"),
        }
        for provider in self.status_providers:
            try:
                status.update(provider())
            except Exception:
                logger.exception("node status provider %r failed", provider)
        status.update(self.steering.status())
        return status

    async def _heartbeat(self, *, leaving: bool = False) -> None:
        idle = self._locally_idle()
        status = "leaving" if leaving else json.dumps(self.node_status(), default=str)
        state = await self.frontier.heartbeat(
            self.node_id,
            ttl_ms=int(self.config.node_timeout_seconds * 1000),
            status=status,
            busy=not idle,
            lease_ms=int(self.config.lease_seconds * 1000),
            renew=list(self._held),
        )
        self._state = state
        if not leaving:
            self._refresh_limits(state.limits)
            await self._apply_control(state.control)
        now = time.monotonic()
        fast = idle and self.config.close_when_finished
        self._next_heartbeat = now + (
            min(IDLE_HEARTBEAT_SECONDS, self.config.heartbeat_seconds)
            if fast
            else self.config.heartbeat_seconds
        )
        self._was_idle = idle
        if state.queued > 0 and not (self._buffer or self._slotted):
            self._next_lease = 0.0
        self._update_finished(state, idle, now)

    def _note_control_seq(self, seq: int) -> None:
        """The job's command sequence as just read: a new command is read (with a
        heartbeat) at once."""
        self._next_control_check = time.monotonic() + CONTROL_CHECK_SECONDS
        if seq != self._control_seq:
            if self._control_seq >= 0:
                self._next_heartbeat = 0.0
            self._control_seq = seq

    # -- adaptive back-off and robots.txt delays (crawlfleet.frontier.throttle) --------
    def site_of(self, request: Request) -> str:
        """The site (queue, budget) of *request*: as leased, else as keyed here."""
        rid = self._handed.get(request)
        site = self._held.get(rid) if rid is not None else None
        return site if site is not None else self.sites.site(request)

    def report_slow(
        self, site: str, why: str, floor_ms: int = 0, first_ms: int = 0, *, latency: bool = False
    ) -> None:
        """Ask the cluster to back *site* off (sent with the next loop round); see
        :meth:`SiteReports.add_slow`."""
        self.reports.add_slow(site, why, floor_ms, first_ms, latency=latency)
        self._kick()

    def report_recovered(self, site: str, why: str) -> None:
        """*site* answers at its normal latency again: its latency back-off ends for
        every node (sent with the next loop round)."""
        self.reports.add_recovered(site, why)
        self._kick()

    def report_robots(self, site: str, delay_ms: int) -> None:
        """*site*'s robots.txt Crawl-delay (0: none), for every node."""
        self.reports.add_robots(site, delay_ms)
        self._kick()

    # -- control commands (crawlfleet.frontier.control) ---------------------------
    async def _apply_control(self, wanted: Desired) -> None:
        before = self.steering.state
        resized, state = self.steering.take(wanted)
        if resized:
            logger.info("Control: concurrency ceiling now %d", self.steering.ceiling)
            self._apply_concurrency()
        if state is None:
            return
        lift = f" (`crawlfleet control resume {self.config.job}` lifts it)"
        logger.info(
            "Control: node %s %s -> %s%s",
            self.node_id,
            before,
            state,
            "" if state == "running" else lift,
        )
        if state in ("paused", "stopped"):
            await self._release_buffer()
        if state == "stopped":
            self._close_once("stopped")
        elif state == "running":
            self._next_lease = 0.0
            self.engine.wake()

    async def _release_buffer(self) -> None:
        """Give the leased requests not handed to the engine back to their queues."""
        waiting = [*self._buffer, *self._slotted.drain()]
        held = [(rid, self._held.pop(rid, "")) for _request, rid in waiting]
        self._buffer.clear()
        if held:
            back = await self.frontier.release(self.node_id, held)
            self._inc("crawlfleet/frontier/released", back)

    def _finish_draining(self) -> None:
        if self.steering.state == "draining" and self._locally_idle():
            self._close_once("drained")

    def _close_once(self, reason: str) -> None:
        if not (self._closing or self._close_asked):
            self._close_asked = True
            logger.info("Control: node %s closes (%s)", self.node_id, reason)
            asyncio.get_running_loop().call_soon(self.engine.close, reason)

    def set_feedback_limit(self, limit: int | None) -> None:
        """The feedback controller's concurrency (None: no limit of its own)."""
        if self.steering.set_feedback(limit):
            self._apply_concurrency()

    @property
    def in_progress(self) -> int:
        """Requests handed to the engine and not finished yet."""
        return len(self._handed)

    def _apply_concurrency(self) -> None:
        self.engine.set_concurrency(self.steering.concurrency)
        self._kick_for_work()

    def _refresh_limits(self, raw: dict[str, str]) -> None:
        """Merge the job's run-time limits (read with the heartbeat) over the configured
        ones."""
        if raw == self._limits_raw:
            return
        self._limits_raw = raw
        valid: dict[str, str] = {}
        for pattern, spec in raw.items():
            try:
                RateLimits.parse({pattern: spec}, source="limits")
                valid[pattern] = spec
            except ConfigError as exc:
                logger.error("Ignoring the job's rate limit %r = %r: %s", pattern, spec, exc)
        self.limits = self.config.rate_limits.merged(
            RateLimits.parse(valid, source="limits", margin=self.config.rate_limit_margin)
        )
        logger.info("Rate limits of job %r now: %s", self.config.job, raw or "as configured")

    def _update_finished(self, state: JobState, idle: bool, now: float) -> None:
        empty = idle and state.empty and not self._seeds_waiting
        if empty and state.leased_total == 0:
            # a job that never had work is not finished: nodes started before the
            # first seed wait for it
            if now >= self._next_no_work_log:
                self._next_no_work_log = now + NO_WORK_LOG_SECONDS
                logger.info(
                    "Job %r has no work yet: waiting for seeds (crawlfleet seed %s URL...)",
                    self.config.job,
                    self.config.job,
                )
            empty = False
        if not empty:
            self._empty_since = None
            self._finished = False
            return
        if self._empty_since is None:
            self._empty_since = now
        if not self._finished and now - self._empty_since >= self.config.finish_grace_seconds:
            self._finished = True
            if self.config.close_when_finished:
                logger.info(
                    "Job %r is finished: nothing queued, nothing leased, no node busy",
                    self.config.job,
                )
            self.engine.wake()

    # -- seed list (scrapy-redis compatible) ----------------------------------------
    async def _pull_seeds(self) -> None:
        key = self.config.start_urls_key
        entries = await self.frontier.read_seeds(key, self.config.start_urls_batch)
        self._seeds_waiting = bool(entries)
        if not entries:
            self._next_seeds = time.monotonic() + max(self._idle_delay, 1.0)
            return
        outgoing: list[tuple[Request, bytes, bytes]] = []
        for raw in entries:
            try:
                request = self._request_from_seed(raw)
                fp = self.fingerprint(request)[:FINGERPRINT_BYTES]
                outgoing.append((request, fp, self.codec.encode(request)))
            except (ValueError, TypeError, SerializationError) as exc:
                logger.warning("Invalid seed %r in %s skipped: %s", raw[:200], key, exc)
                self._inc("crawlfleet/seeds/invalid")
        # queue first, then trim: a crash in between re-reads them, the seen-filter
        # drops the repeats
        self._out.extend(outgoing)
        while self._out:
            await self._flush()
        await self.frontier.trim_seeds(key, entries)
        self._inc("crawlfleet/seeds/read", len(entries))
        self._next_seeds = 0.0

    def _request_from_seed(self, raw: bytes) -> Request:
        make = getattr(self.spider, "make_request_from_data", None)
        if callable(make):  # scrapy-redis spiders decide themselves
            request = make(raw)
            if not isinstance(request, Request):
                raise TypeError(f"make_request_from_data returned {type(request).__name__}")
            return request
        return parse_seed(raw)

    # -- helpers ----------------------------------------------------------------------
    async def _until_reachable(self, what: str, call: Callable[[], Any]) -> Any:
        delay = self.redis_config.retry_min_seconds
        while True:
            try:
                return await call()
            except REDIS_ERRORS as exc:
                logger.warning(
                    "Redis unreachable, cannot %s (%s); retrying in %.1fs", what, exc, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.redis_config.retry_max_seconds)

    def _inc(self, key: str, count: int = 1) -> None:
        if self.stats is not None and count:
            self.stats.inc_value(key, count)

    def _stat(self, key: str) -> int:
        return int(self.stats.get_value(key, 0)) if self.stats is not None else 0

    def _set_stat(self, key: str, value: Any) -> None:
        if self.stats is not None:
            self.stats.set_value(key, value)
