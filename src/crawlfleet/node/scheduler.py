"""The crawlfleet scheduler: Scrapy's scheduler interface on the shared frontier.

A thin adapter. ``enqueue_request()`` and ``next_request()`` never wait on Redis: they
work on the node's :class:`~crawlfleet.node.ledger.Ledger`, which the
:class:`~crawlfleet.node.sync.SyncLoop` keeps in step with the frontier in batches.

A request handed to the engine is acknowledged only once the engine has finished with
it (downloaded, parsed, its new requests buffered, its items through the pipelines,
where the stores return only once an item is durable), and in the same batch as, or
after, those new requests: a node killed at any moment loses nothing, its leases come
back once it misses its heartbeats (or they expire). A request one of whose items a
store gave up (ItemNotDurable: stopping while the store is down) is not acknowledged
but released, back to its queue. While too many items wait for the item stores
(``CRAWLFLEET_ITEMS_PENDING_MAX``), the engine gets nothing and the node leases nothing.
A request that failed for good is acknowledged only once its failure is durable in the
error registry (:meth:`Scheduler.hold_for_record`); until then its lease stays held.

Middlewares and extensions reach the node through this object, registered as the
crawler's ``parts_of(crawler).node`` (:mod:`crawlfleet.parts`); what they may use is
:class:`~crawlfleet.parts.NodeHandle`, found with :func:`~crawlfleet.parts.node_of`.
node/'s own extensions, which use more of it, find it with :meth:`Scheduler.of`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from scrapy import Request, Spider, signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.crawler import Crawler
from scrapy.exceptions import CloseSpider
from scrapy.settings import BaseSettings
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.reactor import is_asyncio_reactor_installed
from twisted.internet.defer import Deferred

from crawlfleet.addon import fail_command, waits_at_wire
from crawlfleet.exceptions import (
    ConfigError,
    ItemNotDurable,
    RedisUnreachable,
    SerializationError,
)
from crawlfleet.frontier.base import FrontierBackend
from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.config import FrontierConfig
from crawlfleet.frontier.records import CHANGES_MAXLEN, FINGERPRINT_BYTES, REVISIT_SHARE
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.frontier.sites import SiteKeyer
from crawlfleet.meta import DELAY_META
from crawlfleet.node.core import NodeCore
from crawlfleet.node.engine import EngineHooks, engine_hooks, no_process_delay, spider_delay
from crawlfleet.node.fingerprints import FingerprintMemo, node_fingerprint
from crawlfleet.node.joining import say_joined
from crawlfleet.node.lateness import Lateness
from crawlfleet.node.leasing import SLOT_HORIZON_SECONDS
from crawlfleet.node.ledger import Ledger
from crawlfleet.node.lifecycle import Lifecycle
from crawlfleet.node.redisspider import adopt, seed_source
from crawlfleet.node.reports import SiteReports
from crawlfleet.node.siterates import SiteRates
from crawlfleet.node.slots import ParseCost, WireEarly
from crawlfleet.node.stats import NodeStats
from crawlfleet.node.status import node_status
from crawlfleet.node.steering import Steering
from crawlfleet.node.summary import log_summary, run_summary
from crawlfleet.node.sync import SyncLoop
from crawlfleet.parts import SendWindow, StatusProvider, node_of, parts_of
from crawlfleet.redis.config import RedisConfig
from crawlfleet.redis.connection import shared_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.revisit.config import revisit_mode, revisit_policy
from crawlfleet.settings.access import get_float, get_int, get_share
from crawlfleet.state.writer import UNWRITTEN

if TYPE_CHECKING:
    from crawlfleet.node.revisits import RevisitKeeper
    from crawlfleet.revisit.policy import RevisitPolicy

__all__ = ["ROBOTS_PROBE_MS", "Scheduler", "new_node_id", "robots_probe_ms"]

logger = logging.getLogger(__name__)

#: The finish reason of a node that could not reach Redis at its start.
REDIS_UNREACHABLE = "redis_unreachable"
#: The finish reason of a node whose settings were refused at its start.
REFUSED = "refused"
#: With ROBOTSTXT_OBEY, a site whose robots.txt no node has read yet gives one request
#: per this long (crawlfleet.middlewares.throttle.ROBOTS_PROBE_SECONDS).
ROBOTS_PROBE_MS = 10_000
#: Scrapy's middleware that reads robots.txt (the probe needs it to end).
ROBOTS_MIDDLEWARE = "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"
#: The longest a response is held back for slots (s; see Scheduler.parse_hold) once the
#: node knows its parse cost: past the farthest slot a lease grants (SLOT_HORIZON_SECONDS).
PARSE_HOLD_MAX = SLOT_HORIZON_SECONDS + 0.1
#: The longest a response is held back for the earliest slot before the node knows its
#: parse cost (s).
PARSE_HOLD_FIRST_MAX = 0.25
#: A parse expected to block the event loop this long (s) or longer keeps the node from
#: leasing until it should be over (see Scheduler.parse_hold).
PARSE_QUIET_SECONDS = 0.05
#: How long after a slot a held response waits: the timer fires, the engine takes the
#: request and the downloader's middlewares pass it.
SLOT_SETTLE_SECONDS = 0.003
#: The spider's output gives way to a slot due within this long (s; see
#: Scheduler.give_way), and takes a turn of the event loop after this long of work
#: while a slot waits: a page's links run through the middlewares and the scheduler one
#: by one, tens of milliseconds on a page of hundreds of links.
GIVE_WAY_SECONDS = 0.002


def robots_probe_ms(settings: BaseSettings) -> int:
    """ROBOTS_PROBE_MS when the node obeys robots.txt and Scrapy's middleware that
    reads it is on (else a probe would never end), otherwise 0."""
    middlewares = settings.getwithbase("DOWNLOADER_MIDDLEWARES")
    if settings.getbool("ROBOTSTXT_OBEY") and middlewares.get(ROBOTS_MIDDLEWARE) is not None:
        return ROBOTS_PROBE_MS
    return 0


def _delay_ms(value: Any) -> int:
    """A request's ``DELAY_META`` (seconds) in whole ms; 0 for none or a bad value."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return 0
    return int(seconds * 1000) if 0 < seconds < 1e9 else 0


def new_node_id() -> str:
    """host-pid-random: unique per process, readable in status listings."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Scheduler(BaseScheduler):
    """A Scrapy scheduler whose queue is one job's shared frontier. *frontier*: where
    that frontier is (default: in Redis through *client*)."""

    def __init__(
        self,
        *,
        client: Redis | None = None,
        config: FrontierConfig,
        redis_config: RedisConfig,
        fingerprint: Callable[[Request], bytes],
        stats: Any = None,
        node_id: str | None = None,
        concurrency: int = 16,
        frontier: FrontierBackend | None = None,
        site_window_seconds: float = 60.0,
        changes_maxlen: int = CHANGES_MAXLEN,
        revisit_share: float = REVISIT_SHARE,
    ) -> None:
        if frontier is None:
            if client is None:
                raise ValueError("Scheduler needs a Redis client or a frontier")
            frontier = JobFrontier(
                client,
                JobKeys.of(redis_config.key_prefix, config.job),
                config.seen,
                shards=config.shards,
                changes_maxlen=changes_maxlen,
                revisit_share=revisit_share,
            )
        self.config = config
        self.redis_config = redis_config
        self.node_id = node_id or new_node_id()
        self.frontier = frontier
        self.fingerprint = fingerprint
        self.stats = NodeStats(stats)
        self.steering = Steering(concurrency, config.prefetch)
        self.loop_lag_ms = 0.0
        self.sites = SiteKeyer(config.site_key)
        self.spider: Spider | None = None
        #: hooks into the engine, set by from_crawler (no-ops without a crawler)
        self.engine = EngineHooks()
        #: callables whose dicts are merged into the node status of each heartbeat
        self.status_providers: list[StatusProvider] = []
        self.site_rates = SiteRates(site_window_seconds)
        #: loop time until which a request taken on its slot may still be on its way to
        #: the downloader (its send-by time; see give_way)
        self._sending_until = 0.0
        #: what parsing a page costs the event loop (see parse_hold)
        self.parse_cost = ParseCost()
        #: loop time at which the outputs of pages last took a turn of the loop
        #: (give_way), and whether one is asked for
        self._turn_at = 0.0
        self._turn_asked = False
        #: loop time of the last give_way() (asked between the objects of pages' outputs)
        self.checked_at = 0.0
        self.ledger = Ledger(self._slot_due, self.site_rates.done, config.seen_cache_size)
        #: the revisits of a continuous crawl (None: CRAWLFLEET_REVISIT is off)
        self.revisits: RevisitKeeper | None = None
        self.lifecycle = Lifecycle(config, self.engine, self.node_id)
        #: the parts every component of the sync loop shares
        self.core = NodeCore(
            frontier,
            self.ledger,
            self.steering,
            self.lifecycle,
            config,
            self.node_id,
            self.engine,
            self.stats,
        )
        self.sync = SyncLoop(
            self.core,
            redis_config=redis_config,
            sites=self.sites,
            fingerprint=self._fingerprint,
            status=self.node_status,
        )
        self._started = time.time()
        #: the event loop the node runs on (set by start(): records settle onto it)
        self._loop: asyncio.AbstractEventLoop | None = None
        #: the node could not start: why (its spider's close reason), else ""
        self.start_failed = ""
        #: scrapy-redis's SCHEDULER_FLUSH_ON_START: reset the job before joining it
        #: (refused while other nodes work on it)
        self.flush_on_start = False
        #: how far ahead slotted requests go to the engine (None: at their slots, as
        #: nothing holds them at the wire)
        self._wire: WireEarly | None = None

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
        config = FrontierConfig.from_settings(settings, spider_name, spider_delay(crawler))
        redis_config = RedisConfig.from_settings(settings)
        # the spider's own start-URL key (a scrapy-redis spider's redis_key) and batch
        seeds = seed_source(crawler.spider, settings, config.start_urls_key)
        config = replace(config, start_urls_key=seeds.key, start_urls_batch=seeds.batch)
        if crawler.spider is not None and adopt(crawler, crawler.spider):
            logger.info(
                "%s is a scrapy-redis spider: the node reads %s (its %s) through the "
                "frontier, %d entries at a time; its own reading and idle hook are off",
                type(crawler.spider).__name__,
                seeds.key,
                seeds.origin,
                seeds.batch,
            )
        no_process_delay(crawler)  # the frontier paces sites for the whole fleet
        assert crawler.request_fingerprinter is not None
        scheduler = cls(
            client=shared_client(crawler, redis_config),
            config=config,
            redis_config=redis_config,
            fingerprint=node_fingerprint(crawler.request_fingerprinter),
            stats=crawler.stats,
            concurrency=settings.getint("CONCURRENT_REQUESTS"),
            site_window_seconds=get_float(
                settings, "CRAWLFLEET_TELEMETRY_WINDOW_SECONDS", minimum=1
            ),
            changes_maxlen=get_int(settings, "CRAWLFLEET_CHANGES_MAXLEN", minimum=1),
            revisit_share=get_share(settings, "CRAWLFLEET_REVISIT_SHARE"),
        )
        parts = parts_of(crawler)
        scheduler.bind_engine(engine_hooks(crawler), parts.status_providers)
        parts.status_providers.append(
            Lateness(
                scheduler.stats,
                blocked=scheduler.ledger.slotted.blocked,
                reply=scheduler.sync.leaser.lead,
                per_domain=settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN"),
            )
        )
        if revisit_mode(settings) != "off":  # off: nothing of it is loaded
            scheduler.keep_revisits(revisit_policy(settings))
        scheduler.sync.backlog.stores = parts.item_stores
        crawler.signals.connect(scheduler.item_dropped, signal=signals.item_dropped)
        crawler.signals.connect(scheduler.spider_opened, signal=signals.spider_opened)
        scheduler.robots_probe_ms = robots_probe_ms(settings)
        scheduler.flush_on_start = settings.getbool("SCHEDULER_FLUSH_ON_START")
        if waits_at_wire(settings):
            scheduler.wait_at_wire()
        parts.node = scheduler  # middlewares and extensions find the node here
        return scheduler

    def keep_revisits(self, policy: RevisitPolicy) -> None:
        """Revisit tracked pages as *policy* says (a continuous crawl): finished
        requests of tracked pages are kept for their next visit, not acknowledged (see
        :mod:`crawlfleet.node.revisits`)."""
        from crawlfleet.node.revisits import RevisitKeeper

        self.revisits = RevisitKeeper(policy, self.encode, self.stats)
        self.ledger.keeper = self.revisits.finished
        self.status_providers.append(self._revisit_status)

    def _revisit_status(self) -> dict[str, Any]:
        """The node's revisit figures, for its status."""
        from crawlfleet.revisit.state import OUTCOMES

        stats = self.stats
        return {
            "revisits": {
                name: stats.get(f"revisit/{name}")
                for name in (*OUTCOMES, "kept", "untracked", "late_seconds")
            }
        }

    @classmethod
    def of(cls, crawler: Crawler | None) -> Scheduler | None:
        """The crawlfleet scheduler of *crawler* with all its parts, for node/'s own
        extensions (feedback, re-crawl, campaigns); None as for
        :func:`~crawlfleet.parts.node_of`, which the others use."""
        node = node_of(crawler)
        return node if isinstance(node, Scheduler) else None

    def bind_engine(self, engine: EngineHooks, providers: list[StatusProvider]) -> None:
        """Use *engine*'s hooks (every part that calls the engine gets them) and publish
        the status of *providers* with each heartbeat."""
        self.engine.bind(engine)  # the object every part holds
        self.status_providers = providers

    @property
    def reports(self) -> SiteReports:
        """What this node learned about sites and has not told the cluster yet."""
        return self.sync.reports

    @property
    def robots_probe_ms(self) -> int:
        """> 0 when the node obeys robots.txt: see crawlfleet.middlewares.throttle."""
        return self.sync.leaser.robots_probe_ms

    @robots_probe_ms.setter
    def robots_probe_ms(self, value: int) -> None:
        self.sync.leaser.robots_probe_ms = value

    # -- Scrapy's scheduler interface -------------------------------------------------
    def open(self, spider: Spider) -> Deferred[None]:
        """Start the node (:meth:`start`). If Redis stays unreachable for
        CRAWLFLEET_REDIS_START_TIMEOUT: one ERROR line, and the spider closes with reason
        ``redis_unreachable`` once it is open (:meth:`spider_opened`)."""
        self.spider = spider
        return deferred_from_coro(self._open(spider))

    async def _open(self, spider: Spider) -> None:
        try:
            await self.start(spider)
        except RedisUnreachable as exc:
            logger.error("crawlfleet: %s", exc)
            self.start_failed = REDIS_UNREACHABLE
        except ConfigError as exc:  # a setting whose meaning cannot be kept
            logger.error("crawlfleet: %s", exc)
            self.start_failed = REFUSED

    def spider_opened(self, spider: Spider) -> None:
        """A node that could not reach Redis at its start closes its spider (reason
        ``redis_unreachable``) and makes ``scrapy crawl`` exit with status 1; one
        whose settings were refused (reason ``refused``), with status 2. (Asked here,
        not by :meth:`open`: Scrapy closes a spider cleanly only once every component
        has opened.)"""
        if self.start_failed:
            fail_command(2 if self.start_failed == REFUSED else 1)
            raise CloseSpider(self.start_failed)

    async def start(self, spider: Spider) -> None:
        """Join the job (reset it first with SCHEDULER_FLUSH_ON_START), start the sync
        loop. RedisUnreachable when Redis does not answer within
        CRAWLFLEET_REDIS_START_TIMEOUT; ConfigError when the job may not be reset."""
        self._loop = asyncio.get_running_loop()
        await self.sync.open(spider, flush_first=self.flush_on_start)
        self.engine.load_handlers()
        say_joined(self.node_id, self.config, self.redis_config)

    def close(self, reason: str) -> Deferred[None]:
        return deferred_from_coro(self.stop(reason))

    async def stop(self, reason: str) -> None:
        """:meth:`close` as a coroutine: hand everything back or in, leave the job."""
        await self.sync.close(reason, self.summary)
        log_summary(self.summary(reason), [store.target for store in self.sync.backlog.stores])

    def has_pending_requests(self) -> bool:
        if self.ledger.busy:
            return True
        if not self.config.close_when_finished or self.steering.state != "running":
            return True  # paused: wait; draining, stopped: the node closes itself
        return not self.lifecycle.finished

    def enqueue_request(self, request: Request) -> bool:
        # a start request passes the seen-filter once (every node runs start()); its
        # retry (Scrapy's RetryMiddleware keeps the meta) must not be taken for a repeat
        once = (
            self.config.start_requests_once
            and request.meta.get("is_start_request")
            and not request.meta.get("retry_times")
        )
        try:
            if request.dont_filter and not once:
                fp = b""
            else:
                fp = self._fingerprint(request)
                if self.ledger.known_duplicate(request, fp):
                    # the shared filter has it (or will, with the batch on its way): a
                    # duplicate without a check in Redis, counted with the next commit
                    return False
            delay_ms = _delay_ms(request.meta.pop(DELAY_META, 0))
            if self.revisits is not None:
                self.revisits.entering(request)
            payload = self.encode(request)
        except SerializationError as exc:
            logger.error("Dropped request: %s", exc, extra={"spider": self.spider})
            self.stats.inc("crawlfleet/scheduler/unserializable")
            return False
        self.ledger.add_out(request, fp, payload, delay_ms)
        if delay_ms:
            self.stats.inc("crawlfleet/scheduler/delayed")
        self.stats.inc("crawlfleet/scheduler/enqueued")
        if len(self.ledger.out) >= self.config.flush_batch:
            self.sync.kick()
        return True

    def next_request(self) -> Request | None:
        if self.steering.state in ("paused", "stopped") or self.sync.backlog.over():
            return None
        if self._holds_its_bound():
            return None
        leased, late = self.ledger.take(asyncio.get_event_loop().time())
        if late:
            self.stats.inc("crawlfleet/scheduler/late", late)
            self.stats.inc("crawlfleet/scheduler/late/loop", late)
            self.sync.kick()
        if self.sync.leaser.low():
            self.sync.kick_for_work()
        if leased is None:
            if not self.lifecycle.finished and not self.ledger.slotted:
                self.stats.inc("crawlfleet/scheduler/starved")
            return None
        self.stats.inc("crawlfleet/scheduler/dequeued")
        window = self.ledger.send_by.get(leased[0])
        if window is not None:  # taken on its slot: on its way to the downloader
            self._sending_until = max(self._sending_until, window.by)
        return leased[0]

    def __len__(self) -> int:
        return len(self.ledger)

    def _holds_its_bound(self) -> bool:
        """The engine holds CRAWLFLEET_ITEMS_PENDING_MAX pages and a downloader's worth
        (CONCURRENT_REQUESTS) more: downloaded, being parsed, their items on their way to
        a store. A crash fetches again what it holds, so it takes nothing more until one
        is done (the engine asks again then). The items' own bound (Backlog) counts only
        what reached a store: while parsing lagged, downloads piled up behind it in
        Scrapy's scraper (a killed node once held 35 pages for a bound of 20 + 4)."""
        inprogress = self.engine.inprogress()
        if inprogress is None:
            return False
        return len(inprogress) >= self.sync.backlog.limit + self.steering.concurrency

    def _fingerprint(self, request: Request) -> bytes:
        return self.fingerprint(request)[:FINGERPRINT_BYTES]

    def _slot_due(self) -> None:
        """The earliest slot is due: the engine asks for it."""
        self.engine.wake()

    def item_dropped(self, item: Any, response: Any, exception: BaseException) -> None:
        """``item_dropped`` handler: an item a store gave up (ItemNotDurable) keeps its
        page from being acknowledged."""
        if isinstance(exception, ItemNotDurable):
            request = getattr(response, "request", None)
            if request is not None:
                self.ledger.mark_unstored(request)

    # -- figures -------------------------------------------------------------------------
    def summary(self, reason: str) -> dict[str, Any]:
        """This node's run in figures (logged at close, kept for ``job status``)."""
        return run_summary(self.stats.all(), self.node_id, reason, self._started)

    def node_status(self) -> dict[str, Any]:
        """What this node publishes with each heartbeat (``<job>:nodeinfo``): see
        :mod:`crawlfleet.node.status`."""
        return node_status(
            self.node_id,
            self.config,
            self.spider,
            self._started,
            ledger=self.ledger,
            stats=self.stats,
            site_rates=self.site_rates,
            backlog=self.sync.backlog,
            steering=self.steering,
            providers=self.status_providers,
        )

    # -- NodeHandle: what middlewares and extensions use --------------------------------
    @property
    def job(self) -> str:
        """The job this node works on."""
        return self.config.job

    def encode(self, request: Request) -> bytes:
        """*request* as the frontier stores it; SerializationError if it cannot go."""
        return self.sync.leaser.codec.encode(request)

    @property
    def in_progress(self) -> int:
        """Requests handed to the engine and not finished yet."""
        return len(self.ledger.handed)

    def site_of(self, request: Request) -> str:
        """The site (queue, budget) of *request*: as leased, else as keyed here."""
        rid = self.ledger.handed.get(request)
        site = self.ledger.held.get(rid) if rid is not None else None
        return site if site is not None else self.sites.site(request)

    @property
    def stock_fingerprint(self) -> bool:
        return isinstance(self.fingerprint, FingerprintMemo)

    def drop_known(self, request: Request) -> bool:
        if request.dont_filter or request.meta.get("is_start_request"):
            return False
        if self.give_way() is not None:
            return False  # on to GiveWay, which pauses the output there for the slot
        return self.ledger.known_duplicate(request, self._fingerprint(request), early=True)

    def send_by(self, request: Request) -> float | None:
        """The event-loop time by which slotted *request* must be on its way (None: it
        has no slot)."""
        window = self.ledger.send_by.get(request)
        return None if window is None else window.by

    def send_window(self, request: Request) -> SendWindow | None:
        """When slotted *request* may leave for the wire (None: it has no slot)."""
        return self.ledger.send_by.get(request)

    def wait_at_wire(self) -> None:
        """Slotted requests wait for their slots at the wire (the download handler holds
        their connection until then): hand them to the engine ahead of their slots
        (:class:`~crawlfleet.node.slots.WireEarly`)."""
        self._wire = WireEarly()
        self.ledger.slotted.early = self._wire.lead()

    def connected(self, seconds: float) -> None:
        """A new connection for a slotted request took *seconds* to open."""
        if self._wire is not None:
            self.ledger.slotted.early = self._wire.opened(seconds)

    def starts_now(self, request: Request) -> bool:
        """Whether the downloader would start *request* at once (not queue it)."""
        return self.engine.starts_now(request)

    def parse_hold(self, size: int = 0) -> float:
        """Seconds to hold a response of *size* bytes back before the spider parses it
        (0: none), so that its parse runs between this node's slots, not over one. Once
        this node's pages taught it how long a parse of that size blocks the event loop
        (:class:`~crawlfleet.node.slots.ParseCost`): until just after the slots the
        parse would overlap, at most :data:`PARSE_HOLD_MAX`; and a parse expected to
        take :data:`PARSE_QUIET_SECONDS` or more keeps a node whose work is paced from
        leasing until it should be over (:meth:`~crawlfleet.node.leasing.Leaser.quiet_until`):
        the slots of that time go to other nodes. Before that (no page of
        :data:`~crawlfleet.node.slots.PARSE_COST_MIN_BYTES` yet), while the earliest
        slot is due sooner than the longest the loop was lately seen blocked when a slot
        came due (:meth:`~crawlfleet.node.slots.SlotQueue.blocked`; at most
        :data:`PARSE_HOLD_FIRST_MAX`), until just after that slot."""
        slotted = self.ledger.slotted
        now = asyncio.get_event_loop().time()
        blocks = self.parse_cost.estimate(size)
        if blocks is None:
            at = slotted.next_at()
            if at is None or not 0 <= at - now < min(slotted.blocked(), PARSE_HOLD_FIRST_MAX):
                return 0.0
            return at - now + SLOT_SETTLE_SECONDS
        start = now
        for at in slotted.times():
            if at < now - SLOT_SETTLE_SECONDS:
                continue  # missed already: given back at the engine's next take
            if at - start > blocks:
                break  # the parse fits before this slot
            start = at + SLOT_SETTLE_SECONDS
        hold = min(start - now, PARSE_HOLD_MAX)
        leaser = self.sync.leaser
        if blocks >= PARSE_QUIET_SECONDS and leaser.pacing():
            leaser.quiet_until(now + hold + blocks)
        return hold

    def parsed(self, size: int, blocked: float) -> None:
        """A page of *size* bytes was parsed; its output blocked the event loop for at
        most *blocked* seconds at once."""
        self.parse_cost.record(size, blocked)

    def give_way(self) -> float | None:
        """How long the spider's output should pause (asked after each object of every
        page's output) so that this node's slots go out on time: until just after its
        next slot when that is due within :data:`GIVE_WAY_SECONDS` (or came due just
        now); 0 (a turn of the event loop) when the outputs of all pages together have
        worked that long in this turn of the loop while a slot waits, while a request
        taken on its slot is on its way to the downloader (until its send-by time), or
        while a lease that may bring slots is on its way (its reply, read late, would
        come with slots already missed); None (go on) otherwise."""
        at = self.ledger.slotted.next_at()
        loop = asyncio.get_event_loop()
        now = self.checked_at = loop.time()
        if at is not None and -SLOT_SETTLE_SECONDS < at - now <= GIVE_WAY_SECONDS:
            return max(0.0, at - now) + SLOT_SETTLE_SECONDS
        if now - self._turn_at < GIVE_WAY_SECONDS:
            return None
        leaser = self.sync.leaser
        if not (at is not None or now < self._sending_until or (leaser.asking and leaser.pacing())):
            return None
        if not self._turn_asked:
            # the next turn starts the count again (the pausing outputs resume after it)
            self._turn_asked = True
            loop.call_soon(self._next_turn)
        return 0.0

    def _next_turn(self) -> None:
        self._turn_asked = False
        self._turn_at = asyncio.get_event_loop().time()

    def unstored(self, request: Request) -> None:
        """A write of *request* (an item, a mark) was given up unstored: it is given
        back to the frontier when it finishes, not acknowledged."""
        self.ledger.mark_unstored(request)

    def shared_redis(self) -> tuple[Redis, str] | None:
        """The Redis client of this node's frontier and the fleet's key prefix; None for
        a frontier that is not in Redis."""
        frontier = self.frontier
        if isinstance(frontier, (JobFrontier, Frontier)):
            return frontier.client, frontier.keys.prefix
        return None

    def report_slow(
        self, site: str, why: str, floor_ms: int = 0, first_ms: int = 0, *, latency: bool = False
    ) -> None:
        """Ask the cluster to back *site* off (sent with the next loop round); see
        :meth:`~crawlfleet.node.reports.SiteReports.add_slow`."""
        self.sync.reports.add_slow(site, why, floor_ms, first_ms, latency=latency)
        self.sync.kick()

    def report_recovered(self, site: str, why: str) -> None:
        """*site* answers at its normal latency again: its latency back-off ends for
        every node (sent with the next loop round)."""
        self.sync.reports.add_recovered(site, why)
        self.sync.kick()

    def report_robots(self, site: str, delay_ms: int) -> None:
        """*site*'s robots.txt Crawl-delay (0: none), for every node."""
        self.sync.reports.add_robots(site, delay_ms)
        self.sync.kick()

    def set_feedback_limit(self, limit: int | None) -> None:
        """The feedback controller's concurrency (None: no limit of its own)."""
        if self.steering.set_feedback(limit):
            self.sync.apply_concurrency()

    def hold_for_record(
        self, request: Request, flush: Callable[[], None]
    ) -> Callable[[str], None] | None:
        """A final failure of *request* is about to be queued for the error registry:
        the node keeps *request*'s lease (held, renewed) until the record is settled,
        and acknowledges it only then (or gives it back if the record could not be
        written: see :mod:`crawlfleet.node.ledger`). Returns the callback to pass the
        registry's writer with the record, safe to call from any thread; None when this
        node does not hold *request* (nothing to wait for). *flush* makes the writer
        write at once: the node calls it when it closes with records still waiting."""
        loop = self._loop
        if loop is None or not self.ledger.recording(request):
            return None
        self.sync.leaving.flush_records = flush

        def settled(outcome: str) -> None:
            # a closed loop (RuntimeError): the node is gone, its leases expire
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._record_settled, request, outcome)

        return settled

    def _record_settled(self, request: Request, outcome: str) -> None:
        """On the loop: the writer settled a failure record of *request*."""
        ledger = self.ledger
        if request not in ledger.records:
            return  # given back already (the node closed meanwhile)
        written = outcome != UNWRITTEN
        if not written:
            self.stats.inc("crawlfleet/errors/unwritten")
        if ledger.record_settled(request, written):
            self.sync.kick()  # its ack or release goes out soon
