"""The node's parts as its crawler holds them: one registered object, :func:`parts_of`.

A crawlfleet node is one Scrapy crawler whose components find one another through it:
the process's Redis client, the scheduler (the node itself), the status providers and
item stores the node publishes and watches, and the downloader middlewares that consult
one another (bans, proxies, sessions, the failure registry). Each is a typed field of
:class:`NodeParts`, made with the crawler's first :func:`parts_of` and kept on the
crawler for its lifetime. A field is None (a list: empty) until its part registers,
and stays so when that part is off; readers check.

Each field is typed by what its readers use of it (a small Protocol), so that this
module imports nothing of crawlfleet: every layer may use it (``redis/`` included).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from redis.asyncio import Redis
from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.http import Response

__all__ = [
    "BanJudge",
    "FailureRecorder",
    "ItemMarker",
    "NodeHandle",
    "NodeParts",
    "ProxyBans",
    "SessionEnder",
    "StatusProvider",
    "StoreGauge",
    "node_of",
    "parts_of",
]

#: The crawler attribute that holds its NodeParts (the only one crawlfleet sets).
ATTRIBUTE = "crawlfleet_parts"

#: A callable returning a JSON-able dict, merged into the node's status at each heartbeat.
StatusProvider = Callable[[], dict[str, Any]]


class SendWindow(NamedTuple):
    """When a slotted request may leave for the wire: not before *at* (its slot), not
    after *by* (event-loop times, s)."""

    at: float
    by: float


class NodeHandle(Protocol):
    """What middlewares and extensions use of the node (the crawlfleet scheduler)."""

    #: this node's id (host-pid-random), as the job's registry knows it
    node_id: str
    #: the worst event-loop lag of the last feedback interval (ms; set by the feedback
    #: controller): a lagging node's latencies say more about it than about sites
    loop_lag_ms: float
    #: the event-loop time of the last :meth:`give_way` (asked after each object of a
    #: page's output, and for each request ``KnownDuplicates`` looks at)
    checked_at: float

    @property
    def job(self) -> str:
        """The job this node works on."""

    @property
    def in_progress(self) -> int:
        """Requests handed to the engine and not finished yet."""

    def site_of(self, request: Request) -> str:
        """The site (queue, budget) of *request*: as leased, else as the node keys it."""

    def encode(self, request: Request) -> bytes:
        """*request* as the frontier stores it; SerializationError if it cannot go."""

    @property
    def stock_fingerprint(self) -> bool:
        """Whether requests are fingerprinted by Scrapy's stock fingerprint (a function
        of their method, URL, body and ``verbatim_url`` meta alone)."""

    def drop_known(self, request: Request) -> bool:
        """Whether to drop *request* where the spider yields it: a duplicate the node
        knows of (its seen cache holds the fingerprint), counted as the scheduler counts
        one. Never a request that skips the filter, nor a start request; not while one
        of the node's slots is due (:meth:`give_way`: the request goes on to the
        ``GiveWay`` middleware, which pauses the page's output for the slot)."""

    def send_by(self, request: Request) -> float | None:
        """The event-loop time by which a request leased with a send time (a slot of a
        rate-limited site) must be on its way; None for a request without one."""

    def send_window(self, request: Request) -> SendWindow | None:
        """When a request leased with a send time may leave for the wire (None: any
        time)."""

    def connected(self, seconds: float) -> None:
        """A new connection for a slotted request took *seconds* to open."""

    def starts_now(self, request: Request) -> bool:
        """Whether the downloader would start *request* at once (not queue it)."""

    def parse_hold(self, size: int = 0) -> float:
        """Seconds to hold a response of *size* bytes back before it is parsed, so that
        the slots its parse would overlap go out first (0: none)."""

    def parsed(self, size: int, blocked: float) -> None:
        """A page of *size* bytes was parsed; its output blocked the event loop for at
        most *blocked* seconds at once."""

    def give_way(self) -> float | None:
        """How long a page's output should pause (asked after each of its objects) so
        that a slot goes out on time (0: a turn of the event loop; None: go on)."""

    def unstored(self, request: Request) -> None:
        """A write of *request* (an item, a mark) was given up unstored: its page goes
        back to the frontier when it finishes, not acknowledged."""

    def shared_redis(self) -> tuple[Redis, str] | None:
        """The Redis client of the node's frontier and the fleet's key prefix, for a part
        that keeps fleet-wide state there (the proxy pool); None when the frontier is
        not in Redis."""

    def report_slow(
        self, site: str, why: str, floor_ms: int = 0, first_ms: int = 0, *, latency: bool = False
    ) -> None:
        """Ask the fleet to back *site* off, saying *why*."""

    def report_recovered(self, site: str, why: str) -> None:
        """*site* answers at its normal latency again: its latency back-off ends."""

    def report_robots(self, site: str, delay_ms: int) -> None:
        """*site*'s robots.txt Crawl-delay (0: none), for every node."""

    def set_feedback_limit(self, limit: int | None) -> None:
        """The feedback controller's concurrency (None: no limit of its own)."""

    def hold_for_record(
        self, request: Request, flush: Callable[[], None]
    ) -> Callable[[str], None] | None:
        """Keep *request*'s lease until its failure record is settled; the callback to
        settle it with (the writer's outcome), or None when the node does not hold it."""


class StoreGauge(Protocol):
    """What the node reads of an item store (a sink)."""

    @property
    def target(self) -> str:
        """What the store writes to, for log lines."""

    @property
    def pending(self) -> int:
        """Records accepted but not written yet."""

    @property
    def unreachable(self) -> bool:
        """The store is down: its last attempt failed and nothing was written since."""


class ItemMarker(Protocol):
    """What the gone marks ask of an item store (its store pipeline)."""

    async def mark_gone(self, key: str, url: str | None, gone_at: str) -> None:
        """Set ``gone_at`` (ISO 8601) on the stored item with *key* (the item of the
        page *url*); return once that is durable. Raises ItemNotDurable if the store
        gave it up."""


class BanJudge(Protocol):
    """What the proxy rotation asks of the ban detector."""

    def why_banned(self, request: Request, response: Response) -> str | None:
        """Why *response* says the site refused the crawler, or None."""


class ProxyBans(Protocol):
    """What the ban detector tells the proxy rotation."""

    def banned(self, request: Request) -> None:
        """The site refused the crawler through *request*'s proxy."""


class SessionEnder(Protocol):
    """What the proxy rotation tells the sessions middleware."""

    def end(self, session: str) -> None:
        """*session* is over: its site starts a new one."""


class FailureRecorder(Protocol):
    """What the middlewares tell the failure registry."""

    def record(
        self,
        request: Request,
        reason: str,
        detail: str,
        *,
        status: int | None = None,
        stack: str | None = None,
    ) -> None:
        """*request* failed for good, for *reason*."""


@dataclass
class NodeParts:
    """The parts of one crawler's node (see the module docstring)."""

    #: the process's Redis client (crawlfleet.redis.connection.shared_client)
    redis: Redis | None = None
    #: the node: the crawlfleet scheduler (None under another scheduler)
    node: NodeHandle | None = None
    #: merged into the node's status at each heartbeat, in order
    status_providers: list[StatusProvider] = field(default_factory=list)
    #: the item stores whose backlog the node watches (each store pipeline's sink)
    item_stores: list[StoreGauge] = field(default_factory=list)
    #: the item stores that mark the items of gone pages (each store pipeline)
    item_markers: list[ItemMarker] = field(default_factory=list)
    #: the identities of the item stores, as published (None: not published yet)
    store_identities: list[dict[str, str]] | None = None
    #: the ban detector (CRAWLFLEET_BANS), for the proxy rotation
    bans: BanJudge | None = None
    #: the proxy rotation (CRAWLFLEET_PROXY_ENABLED), for the ban detector
    proxies: ProxyBans | None = None
    #: the sessions middleware (CRAWLFLEET_SESSIONS), for the proxy rotation
    sessions: SessionEnder | None = None
    #: the failure registry (CRAWLFLEET_ERRORS), for the middlewares that give up
    failures: FailureRecorder | None = None


def parts_of(crawler: Crawler) -> NodeParts:
    """*crawler*'s node parts, made empty on the first call and the same object after."""
    parts = getattr(crawler, ATTRIBUTE, None)
    if not isinstance(parts, NodeParts):
        parts = NodeParts()
        setattr(crawler, ATTRIBUTE, parts)
    return parts


def node_of(crawler: Crawler | None) -> NodeHandle | None:
    """The node (the crawlfleet scheduler) of *crawler*: None without a crawler, before
    the scheduler is built, or when the crawler runs another scheduler."""
    return parts_of(crawler).node if crawler is not None else None
