"""What a node needs of a frontier: the operations of :class:`~crawlfleet.frontier.sharded.
JobFrontier` (one job in Redis, over its shards) that the node's sync loop calls, as one
Protocol.

Two implementations pass the same contract tests (tests/frontier/test_frontier_scripts.py):
the Redis one, which every node of a fleet shares, and :class:`~crawlfleet.frontier.memory.
MemoryFrontier`, one job in this process's memory, which lets the node's parts be
tested without Redis; both take their ``commit`` from :class:`Committer`. Every method
may raise the connection errors of ``crawlfleet.redis.connection.REDIS_ERRORS``;
callers decide how to wait. A commit of a job in several shards may raise
:class:`PartialCommit` (one of them) when it was done in part: the caller sends only
the rest again.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, Unpack

from redis.exceptions import ConnectionError as RedisConnectionError

from crawlfleet.frontier.records import (
    BackoffOptions,
    CommitBatch,
    CommitResult,
    HeartbeatOptions,
    JobState,
    LeaseAsk,
    LeaseOptions,
    LeaseResult,
    Outgoing,
    Revisit,
    SeedBatch,
    Untrack,
)
from crawlfleet.redis.connection import REDIS_ERRORS

__all__ = ["Committer", "FrontierBackend", "PartialCommit"]

logger = logging.getLogger(__name__)


class PartialCommit(RedisConnectionError):
    """A commit of a sharded job failed in some shards after others did their part:
    *result* is what was done, *requests* the indexes (in the batch) of the requests
    queued or found duplicates, *acks* the rids of the acknowledgements, revisits and
    untracks done (applied, or found no longer the node's). The rest was not done.
    *cause*: the first failure. Caught as a Redis outage (REDIS_ERRORS)."""

    def __init__(
        self, cause: BaseException, result: CommitResult, requests: set[int], acks: set[str]
    ) -> None:
        super().__init__(f"a commit was done in part ({cause!r})")
        self.cause = cause
        self.result = result
        self.requests = frozenset(requests)
        self.acks = frozenset(acks)


class Committer(Protocol):
    """The commit of every frontier, its signature and contract stated once: a frontier
    subclasses this and implements :meth:`_commit`, which gets the arguments as one
    :class:`~crawlfleet.frontier.records.CommitBatch`."""

    async def commit(
        self,
        node: str,
        requests: Sequence[Outgoing] = (),
        acks: Sequence[str] = (),
        bad: Sequence[str] = (),
        *,
        known: int = 0,
        epoch: str = "",
        revisits: Sequence[Revisit] = (),
        untracked: Sequence[Untrack] = (),
        feed: int = -1,
    ) -> CommitResult:
        """Queue *requests* (dropping what the seen-filter knows), acknowledge the leases
        *acks* of *node* (done: removed for good) and set the entries *bad* aside. A
        request with a ``delay_ms`` waits that long first (in the job's waiting set:
        nobody's lease, counted "leased" and "waiting"), then
        :meth:`FrontierBackend.reclaim_expired` queues it.

        *revisits* (:class:`~crawlfleet.frontier.records.Revisit`): leases of *node*
        finished and kept for a later visit: each keeps its rid, priority and site, gets
        its new payload and waits its delay as a request with a ``delay_ms`` does (a
        revisit counts as acknowledged, "acked", and as "waiting" and "revisits"; a new
        one as "tracked"). *untracked* (:class:`~crawlfleet.frontier.records.Untrack`):
        leases of tracked requests acknowledged for good ("tracked" - 1). Either is
        applied only while the lease is still *node*'s; its non-empty event goes to the
        job's change stream (counted "changes"), trimmed to about the frontier's
        ``changes_maxlen`` newest.

        The result names the job's *epoch*: set by its first commit, new after each
        reset. *known* duplicates the node found itself (fingerprints it knows the
        seen-filter holds) are counted with the job's duplicates only if *epoch* is the
        job's (``CommitResult.known_counted``); else the job was reset since the node
        learned them, and they are not duplicates.

        *feed* (0 or more): the node's place in the job's feed, the fingerprints its
        commits added to the seen-filter in this epoch, in order. The result gives up to
        :data:`~crawlfleet.frontier.records.FEED_READ` of them from that place on (from
        the oldest kept when the place is older, or of another epoch) and the node's
        next place (``CommitResult.feed``, ``feed_place``; after this commit's own when
        it has read them all); this commit's new fingerprints join the feed. A frontier
        without a feed (a job of several shards) gives none and the place -1."""
        return await self._commit(
            CommitBatch(node, requests, acks, bad, known, epoch, revisits, untracked, feed)
        )

    async def commit_batch(self, batch: CommitBatch) -> CommitResult:
        """:meth:`commit`, its arguments as one *batch* (a node's outbox builds one)."""
        return await self._commit(batch)

    @abstractmethod
    async def _commit(self, batch: CommitBatch) -> CommitResult:
        """Do what :meth:`commit` says, with its arguments *batch*."""

    @abstractmethod
    async def lease(
        self, node: str, n: int, sites: Sequence[str], **options: Unpack[LeaseOptions]
    ) -> LeaseResult:
        """See :meth:`FrontierBackend.lease`."""

    async def commit_lease(
        self, batch: CommitBatch, ask: LeaseAsk
    ) -> tuple[CommitResult, LeaseResult | None]:
        """The commit *batch* (as :meth:`commit` does it, PartialCommit included), then
        a lease for its node as *ask* says (as :meth:`lease` does it): a node's round.
        A frontier on one Redis does both in one script call; others (a job of several
        shards, a Redis Cluster, memory) in turn, here. The lease is None when it was not
        made because its call failed after the commit was done: the commit's result
        stands, and the node leases again later."""
        committed = await self._commit(batch)
        try:
            leased = await self.lease(batch.node, ask.n, ask.sites, **ask.options)
        except REDIS_ERRORS as exc:
            logger.debug("A lease after a commit failed (%r): leased later", exc)
            return committed, None
        return committed, leased


class FrontierBackend(Committer, Protocol):
    """One job's shared frontier, as a node uses it."""

    @property
    def round_trips(self) -> int:
        """Round trips made so far (for the node's statistics)."""
        ...

    #: waiting requests (retries backing off) this client queued once their time had
    #: come, in :meth:`reclaim_expired` (for the node's statistics; the node resets it)
    came_due: int

    async def register_job(self) -> None:
        """Make the job known (listed by ``crawlfleet job list``)."""

    async def offer(self, size: int) -> list[str]:
        """Up to *size* sites that have queued requests, in the order to lease them."""
        ...

    async def lease(
        self, node: str, n: int, sites: Sequence[str], **options: Unpack[LeaseOptions]
    ) -> LeaseResult:
        """Lease up to *n* requests of *sites* to *node*, as *options* say
        (:class:`~crawlfleet.frontier.records.LeaseOptions`); rate-limited sites
        (interval > 0) get a send time per request."""
        ...

    async def heartbeat(self, node: str, **beat: Unpack[HeartbeatOptions]) -> JobState:
        """*node* is alive, renews its leases and reads the job's state, as *beat* says
        (:class:`~crawlfleet.frontier.records.HeartbeatOptions`; "leaving": *node* is
        gone)."""
        ...

    async def control_seq(self) -> int:
        """The sequence number of the job's newest control command."""
        ...

    async def release(self, node: str, held: Iterable[tuple[str, str]]) -> int:
        """Give the leases *held* ((rid, site) pairs) of *node* back to their queues."""
        ...

    async def reclaim_expired(self, limit: int = 1000, *, grace_ms: int = 0) -> int:
        """Return expired leases (and those of nodes silent for *grace_ms*) to their
        queues; how many. Waiting requests whose time has come are queued too (counted in
        :attr:`came_due`, not in the result)."""
        ...

    async def live_nodes(self) -> list[str]:
        """The nodes of the job that are alive now."""
        ...

    async def join_alone(self, node: str, ttl_ms: int) -> list[str]:
        """Register *node* as alive for *ttl_ms* unless other nodes are alive on the
        job, in one step: those other nodes, else [] (registered)."""
        ...

    async def reset(self, *, keep_limits: bool = False, keep_nodes: bool = False) -> int:
        """Delete the job's crawl state (the caller makes sure no node works on it),
        its registry of live nodes unless *keep_nodes*; the keys deleted."""
        ...

    async def read_seeds(self, key: str, n: int, node: str, lock_ms: int) -> SeedBatch:
        """Up to *n* entries of the seed key *key* (a list, set or sorted set; not
        removed), read by *node*, which then reads that key alone for *lock_ms* or until
        :meth:`done_seeds`."""
        ...

    async def done_seeds(
        self, key: str, node: str, batch: SeedBatch, unreadable: Sequence[bytes] = ()
    ) -> int:
        """*node* queued *batch*: remove its entries from *key*, set *unreadable* (some of
        them) aside, let other nodes read the key. Returns the entries removed."""
        ...

    async def save_summary(self, node: str, summary: dict[str, Any]) -> None:
        """Keep *node*'s end-of-run figures for ``job status``."""

    async def backoff(
        self, slow: Mapping[str, int | tuple[int, int]], **options: Unpack[BackoffOptions]
    ) -> dict[str, int]:
        """Back the sites of *slow* off (site -> floor ms, or (floor ms, first ms)), as
        *options* say (:class:`~crawlfleet.frontier.records.BackoffOptions`). Returns the
        sites raised and their new intervals (ms)."""
        ...

    async def recovered(self, sites: Iterable[str]) -> list[str]:
        """End the latency back-offs of *sites*; the sites whose back-off ended."""
        ...

    async def set_robots(self, delays: Mapping[str, int]) -> dict[str, int]:
        """Record robots.txt Crawl-delays (site -> ms, 0: none)."""
        ...
