"""One job's frontier over the shards it was created with.

A job created with CRAWLFLEET_SHARDS = N > 1 keeps its queues, leases and seen-filter in
N shards, each under a hash tag of its own (crawlfleet.redis.keys), so that a Redis
Cluster spreads one crawl over its masters. A site, and so every URL of it, belongs to
one shard (:func:`shard_of`: a stable hash of the site name), which keeps each script
on one shard: a commit queues a site's requests and checks their URLs in that shard's
seen-filter, a lease takes a site's requests and paces it in the fleet's politeness
keys (as one script on one Redis, as three on a cluster: crawlfleet.frontier.client).

:class:`JobFrontier` is what every part of crawlfleet opens for a job. It reads the
job's shard count once (a key in shard 0; a job created before shards existed has
none and is one shard) and then:

- commits, releases, renewals and reclaims go to the shards concerned, in parallel; a
  commit acknowledges only after every shard queued its part, and one that fails
  midway says what was done (:class:`~crawlfleet.frontier.base.PartialCommit`);
- a lease asks the shards of its offer, in parallel, for their shares of the requests
  wanted, and a few other shards, in turn, for their next sites; the offer it returns
  holds sites of a few shards, those that may be ready first, the others in turn, so
  that every shard gets leased from and a lease calls a few shards, not all; a shard
  that fails leaves the offer until it answers again, and what the others leased is
  kept;
- a request id is ``<shard>:<id>`` so that its ack finds its shard;
- the node registry, control commands, run-time limits and summaries are the job's, in
  shard 0; every shard keeps the nodes that hold its leases, so that it can reclaim
  them from a node that died.

With one shard every call goes straight to the shard's :class:`Frontier`, unchanged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import zlib
from collections.abc import Awaitable, Container, Iterable, Mapping, Sequence
from typing import Any, TypeVar, Unpack

from redis.asyncio import Redis

from crawlfleet.exceptions import CommandFailed
from crawlfleet.frontier.base import Committer, PartialCommit
from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.records import (
    CHANGES_MAXLEN,
    MAX_SHARDS,
    REVISIT_SHARE,
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
    SeenConfig,
    Untrack,
    counter_value,
)
from crawlfleet.redis.connection import REDIS_ERRORS
from crawlfleet.redis.keys import JobKeys
from crawlfleet.redis.replies import text

__all__ = ["JobFrontier", "interleave", "shard_of", "sum_counters"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
E = TypeVar("E", Revisit, Untrack)

#: Counters that are not additive across shards: read from shard 0.
_JOB_COUNTERS = frozenset({"beat_at", "resumed_at", "seq", "control_seq", "bad_seq", "epoch"})


def shard_of(site: str, shards: int) -> int:
    """The shard that holds *site* among *shards* (stable across processes and
    versions: CRC-32 of its UTF-8 name)."""
    return zlib.crc32(site.encode("utf-8", "surrogatepass")) % shards if shards > 1 else 0


def sum_counters(each: Sequence[Mapping[str, int]]) -> dict[str, int]:
    """A sharded job's counters from its shards' (shard 0 first): summed, but for its
    times and sequences (shard 0's)."""
    total = dict(each[0])
    for more in each[1:]:
        for name, value in more.items():
            if name not in _JOB_COUNTERS:
                total[name] = total.get(name, 0) + counter_value(value)
    return total


def _shard_rid(rid: str, count: int) -> tuple[int, str]:
    """(shard, the shard's own id) of request id *rid* ("<shard>:<id>") of a job of
    *count* shards; an id of no shard is shard 0's as it is (it matches nothing there)."""
    head, sep, tail = rid.partition(":")
    if sep and head.isdigit() and int(head) < count:
        return int(head), tail
    return 0, rid


def interleave(lists: Sequence[Sequence[str]], size: int) -> list[str]:
    """One item of each list in turn, up to *size* items."""
    out: list[str] = []
    depth = max((len(x) for x in lists), default=0)
    for i in range(depth):
        for x in lists:
            if i < len(x):
                out.append(x[i])
                if len(out) >= size:
                    return out
    return out


def _of_group(options: LeaseOptions, group: list[int]) -> LeaseOptions:
    """*options* of a lease of the offered sites at the indexes *group* only (their
    per-site values)."""
    part = options.copy()
    intervals, budgets, late = options.get("intervals"), options.get("budgets"), options.get("late")
    part["intervals"] = None if intervals is None else [intervals[i] for i in group]
    part["budgets"] = None if budgets is None else [budgets[i] for i in group]
    part["late"] = None if late is None else [late[i] for i in group]
    return part


def _in_shard(beat: HeartbeatOptions, shard: int, renew: list[str]) -> HeartbeatOptions:
    """*beat* as shard *shard* gets it: the node's leases *renew* there, its status in
    shard 0 only (the others keep "{}", or "leaving")."""
    part = beat.copy()
    part["renew"] = renew
    if shard and beat["status"] != "leaving":
        part["status"] = "{}"
    return part


def _shares(n: int, sizes: Sequence[int]) -> list[int]:
    """*n* split in proportion to *sizes*: each non-zero size gets at least 1 while
    there are enough (the first ones), the rest goes to the first ones too."""
    total = sum(sizes)
    shares = [0] * len(sizes)
    given = 0
    for i, size in enumerate(sizes):
        if size and given < n:
            shares[i] = min(n - given, max(1, n * size // total))
            given += shares[i]
    left = n - given
    for i, s in enumerate(sizes):
        if left <= 0:
            break
        if s:
            shares[i] += 1
            left -= 1
    return shares


class _Committed:
    """What the shards of one commit did so far (request indexes by shard: *where*)."""

    def __init__(self, where: list[list[int]]) -> None:
        self.where = where
        self.queued = self.duplicates = self.acked = self.known = 0
        self.revisited = self.untracked = 0
        self.epoch = ""
        self.dups: list[int] = []
        self.requests: set[int] = set()
        self.acks: set[str] = set()

    @property
    def anything(self) -> bool:
        return bool(
            self.requests
            or self.acks
            or self.queued
            or self.acked
            or self.known
            or self.revisited
            or self.untracked
        )

    def add(self, shard: int, r: CommitResult, *, with_requests: bool) -> None:
        self.queued += r.queued
        self.duplicates += r.duplicates
        self.acked += r.acked
        self.revisited += r.revisited
        self.untracked += r.untracked
        if with_requests:
            self.requests.update(self.where[shard])
            self.dups += [self.where[shard][i] for i in r.duplicate_indexes]
            if shard == 0:  # the job's epoch, and the node's own duplicates, are shard 0's
                self.epoch, self.known = r.epoch, r.known_counted

    def result(self) -> CommitResult:
        return CommitResult(
            self.queued,
            self.duplicates,
            self.acked,
            sorted(self.dups),
            self.epoch,
            self.known,
            self.revisited,
            self.untracked,
        )


#: Shards that are not in a lease's offer asked for their next sites by that lease.
PEEKS_PER_LEASE = 4


class _ShardsView:
    """What a node last heard from each shard of its job, for building offers: its next
    sites, counts, and when it may be ready (0: may be now; None: has nothing ready and
    no paced site waiting; else monotonic time of its first paced site)."""

    def __init__(self, count: int) -> None:
        self.offers: list[list[str]] = [[] for _ in range(count)]
        self.queued = [0] * count
        self.leased = [0] * count
        self.ready_at: list[float | None] = [0.0] * count
        self.control_seq = 0

    def heard(self, shard: int, r: LeaseResult, now: float, *, tried: bool) -> None:
        self.offers[shard] = list(r.offer)
        self.queued[shard], self.leased[shard] = max(0, r.queued), max(0, r.leased)
        if shard == 0:
            self.control_seq = r.control_seq
        if not tried:
            return
        if r.entries:
            self.ready_at[shard] = 0.0
        elif r.ready_in_us >= 0:
            self.ready_at[shard] = now + r.ready_in_us / 1_000_000
        else:
            self.ready_at[shard] = None

    def failed(self, shard: int) -> None:
        """*shard* did not answer: its sites leave the offer until it answers again."""
        self.offers[shard] = []
        self.ready_at[shard] = None

    def hear(
        self,
        shards: Iterable[int],
        outcomes: Sequence[LeaseResult | BaseException],
        now: float,
        *,
        tried: Container[int],
    ) -> list[tuple[int, LeaseResult]]:
        """Note the replies of *shards* (leased from if in *tried*, else peeked) and
        those that failed (see :meth:`failed`); (shard, reply) of those that answered.
        Raises the first failure when none answered, or when it is not an outage."""
        answered: list[tuple[int, LeaseResult]] = []
        first: BaseException | None = None
        for shard, outcome in zip(shards, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                first = first or outcome
                self.failed(shard)
            else:
                self.heard(shard, outcome, now, tried=shard in tried)
                answered.append((shard, outcome))
        if first is not None and (not answered or not isinstance(first, REDIS_ERRORS)):
            raise first
        return answered

    def _may_be_ready(self, shard: int, now: float) -> bool:
        at = self.ready_at[shard]
        return at is not None and at <= now

    def offer(self, order: Sequence[int], size: int, now: float) -> list[str]:
        """Up to *size* sites: at most a quarter of them from one shard; the shards that
        may be ready first, then the others, each group in *order*."""
        cap = max(1, size // 4)
        first = [s for s in order if self._may_be_ready(s, now)]
        rest = [s for s in order if not self._may_be_ready(s, now)]
        out: list[str] = []
        for s in [*first, *rest]:
            out += self.offers[s][: min(cap, size - len(out))]
            if len(out) >= size:
                break
        return out

    def ready_in_us(self, now: float) -> int:
        """When to lease again if this lease got nothing: now when a shard with sites may
        be ready, else when the first paced one is (-1: none is known)."""
        waits = [
            max(0.0, at - now)
            for s, at in enumerate(self.ready_at)
            if at is not None and self.offers[s]
        ]
        return int(min(waits) * 1_000_000) if waits else -1


class JobFrontier(Committer):
    """The frontier of one job over its shards (see the module's docstring). *shards*:
    the count a job gets when this object creates it (CRAWLFLEET_SHARDS); a job keeps
    the count it was created with. *changes_maxlen*: the events each shard's change
    stream keeps (about); *revisit_share*: each shard's (see :class:`Frontier`): a
    site's revisits and new URLs are in its shard, so the share holds per site."""

    def __init__(
        self,
        client: Redis,
        keys: JobKeys,
        seen: SeenConfig | None = None,
        *,
        shards: int = 1,
        changes_maxlen: int = CHANGES_MAXLEN,
        revisit_share: float = REVISIT_SHARE,
    ) -> None:
        self.client = client
        self.keys = keys
        self.seen = seen or SeenConfig()
        self.wanted = shards
        self.changes_maxlen = changes_maxlen
        self.revisit_share = revisit_share
        #: shard 0: the job's own keys, and its registry, control and limits
        self.home = Frontier(
            client, keys, self.seen, changes_maxlen=changes_maxlen, revisit_share=revisit_share
        )
        self._parts: list[Frontier] | None = None
        self._own_trips = 0
        #: where the next lease's turn of shards starts, and what leases heard of them
        self._cursor = 0
        self._shard_view: _ShardsView | None = None

    # -- what the node's statistics read -------------------------------------------------
    @property
    def round_trips(self) -> int:
        parts = self._parts or [self.home]
        return self._own_trips + sum(p.round_trips for p in parts)

    @property
    def came_due(self) -> int:
        return sum(p.came_due for p in self._parts or [self.home])

    @came_due.setter
    def came_due(self, value: int) -> None:  # the node sets 0 once it counted them
        for p in self._parts or [self.home]:
            p.came_due = 0
        self.home.came_due = value

    # -- the shards ----------------------------------------------------------------------
    async def shards(self, *, create: bool = False) -> list[Frontier]:
        """The job's shards, shard 0 first. With *create*, a job that has no shard count
        yet gets one (this object's, or 1 for a job that queued requests before shards
        existed); without, such a job is read as one shard. CommandFailed when the count
        in Redis is not one."""
        if self._parts is not None:
            return self._parts
        k = self.keys
        self._own_trips += 1
        raw = await self.client.get(k.shards_key)
        if raw is None:
            if not create:
                return [self.home]
            count = self.wanted
            if count > 1:
                self._own_trips += 1
                if await self.client.hexists(k.counters, "seq"):
                    count = 1  # it queued requests before shards existed
            self._own_trips += 2
            await self.client.set(k.shards_key, count, nx=True)
            raw = await self.client.get(k.shards_key)
        try:
            count = int(text(raw))
        except ValueError:
            count = 0
        if not 1 <= count <= MAX_SHARDS:
            raise CommandFailed(
                f"job {k.job!r}: its shard count in Redis ({k.shards_key}) is {text(raw)!r}, "
                f"not a number from 1 to {MAX_SHARDS}"
            )
        if create and self.wanted > 1 and self.wanted != count:
            logger.warning(
                "Job %s has %d shard(s), set when it was created: CRAWLFLEET_SHARDS = %d "
                "is ignored (a job's shard count cannot change; reset it to start over)",
                k.job,
                count,
                self.wanted,
            )
        if count > 1:
            # the job's seen-filter is split too: each shard's Bloom filter holds its part
            per = dataclasses.replace(
                self.seen, bloom_capacity=max(1000, self.seen.bloom_capacity // count)
            )
            self.home.seen = per
            others = [
                Frontier(
                    self.client,
                    k.in_shard(i, count),
                    per,
                    changes_maxlen=self.changes_maxlen,
                    revisit_share=self.revisit_share,
                )
                for i in range(1, count)
            ]
            self._parts = [self.home, *others]
        else:
            self._parts = [self.home]
        return self._parts

    def _split(self, rids: Iterable[str], count: int) -> list[list[tuple[str, str]]]:
        """Request ids ("<shard>:<id>") by shard: (the id as given, the shard's own id).
        An id of no shard goes to shard 0 as it is (it matches nothing there)."""
        out: list[list[tuple[str, str]]] = [[] for _ in range(count)]
        for rid in rids:
            shard, own = _shard_rid(rid, count)
            out[shard].append((rid, own))
        return out

    def _route(self, ends: Sequence[E], count: int) -> list[list[tuple[str, E]]]:
        """Revisits or untracks by shard, routed by rid as :meth:`_split` routes acks:
        (the rid as given, the record with the shard's own rid)."""
        out: list[list[tuple[str, E]]] = [[] for _ in range(count)]
        for end in ends:
            shard, rid = _shard_rid(end.rid, count)
            out[shard].append((end.rid, dataclasses.replace(end, rid=rid)))
        return out

    @staticmethod
    async def _each(calls: Sequence[Awaitable[T]]) -> list[T]:
        """Run *calls* at once; the first failure is raised once all are done (what
        succeeded stays done: every operation sent in several parts may be sent again)."""
        results = await asyncio.gather(*calls, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results  # type: ignore[return-value]

    # -- queueing ------------------------------------------------------------------------
    async def register_job(self) -> None:
        """List the job (as :meth:`Frontier.register_job`) and fix its shard count."""
        await self.home.register_job()
        await self.shards(create=True)

    async def _commit(self, batch: CommitBatch) -> CommitResult:
        """As :meth:`Frontier.commit`: one script per shard concerned, at once. The
        acknowledgements (revisits and untracks too: each to the shard of its rid, as an
        ack) go with the requests only when these are all in one shard, else after every
        shard has queued its part, so that a page is never acknowledged while a link it
        yielded is not queued. When some shards fail after others did
        their part, :class:`PartialCommit` says what was done: send only the rest again
        (requests that bypass the seen-filter would otherwise be queued twice). The
        job's epoch is shard 0's, which counts the *known* duplicates: it is called
        when there are some, or while *epoch* is not known."""
        parts = await self.shards(create=True)
        if len(parts) == 1:
            return await self.home._commit(batch)
        node, known, epoch = batch.node, batch.known, batch.epoch
        count = len(parts)
        reqs: list[list[Outgoing]] = [[] for _ in parts]
        where: list[list[int]] = [[] for _ in parts]
        for i, r in enumerate(batch.requests):
            s = shard_of(r.site, count)
            reqs[s].append(r)
            where[s].append(i)
        acks_by, bad_by = self._split(batch.acks, count), self._split(batch.bad, count)
        revisits_by = self._route(batch.revisits, count)
        untracked_by = self._route(batch.untracked, count)
        ended = [
            [
                *acks_by[s],
                *((g, v.rid) for g, v in revisits_by[s]),
                *((g, u.rid) for g, u in untracked_by[s]),
            ]
            for s in range(count)
        ]
        carrying = [s for s in range(count) if reqs[s] or bad_by[s]]
        # shard 0 counts the known duplicates and tells the epoch (no link to queue)
        home = (known > 0 or not epoch) and 0 not in carrying
        first = [0, *carrying] if home else carrying
        # acknowledgements ride along only where nothing else can fail without them
        riding = set(first) if len(first) == 1 else set(carrying) if len(carrying) == 1 else set()
        then = [s for s in range(count) if ended[s] and s not in riding]
        total = _Committed(where)

        async def phase(shards: list[int], *, with_requests: bool) -> None:
            def ending(s: int) -> bool:
                return s in riding or not with_requests

            calls = [
                parts[s].commit(
                    node,
                    reqs[s] if with_requests else (),
                    [rid for _, rid in acks_by[s]] if ending(s) else (),
                    [rid for _, rid in bad_by[s]] if with_requests else (),
                    known=known if s == 0 and with_requests else 0,
                    epoch=epoch,
                    revisits=[v for _, v in revisits_by[s]] if ending(s) else (),
                    untracked=[u for _, u in untracked_by[s]] if ending(s) else (),
                )
                for s in shards
            ]
            outcomes = await asyncio.gather(*calls, return_exceptions=True)
            failed: BaseException | None = None
            for s, outcome in zip(shards, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    failed = failed or outcome
                    continue
                total.add(s, outcome, with_requests=with_requests)
                if ending(s):
                    total.acks.update(original for original, _ in ended[s])
            if failed is not None:
                if total.anything and isinstance(failed, REDIS_ERRORS):
                    raise PartialCommit(failed, total.result(), total.requests, total.acks)
                raise failed

        if first:
            await phase(first, with_requests=True)
        if then:
            await phase(then, with_requests=False)
        return total.result()

    async def commit_lease(
        self, batch: CommitBatch, ask: LeaseAsk
    ) -> tuple[CommitResult, LeaseResult | None]:
        """As :meth:`Frontier.commit_lease` for a job of one shard (one script); a job of
        several shards commits, then leases (:meth:`Committer.commit_lease`)."""
        parts = await self.shards(create=True)
        if len(parts) == 1:
            return await self.home.commit_lease(batch, ask)
        return await super().commit_lease(batch, ask)

    async def offer(self, size: int) -> list[str]:
        """Up to *size* sites with queued requests, as a lease offers them (asks every
        shard: a node's first lease, or one after its job had nothing queued; a shard
        that fails is left out, unless all do)."""
        parts = await self.shards()
        if len(parts) == 1:
            return await self.home.offer(size)
        view = self._view(len(parts))
        outcomes = await asyncio.gather(*(p.peek(size) for p in parts), return_exceptions=True)
        now = time.monotonic()
        view.hear(range(len(parts)), outcomes, now, tried=())
        return view.offer(self._rotation(len(parts)), size, now)

    async def lease(
        self, node: str, n: int, sites: Sequence[str], **options: Unpack[LeaseOptions]
    ) -> LeaseResult:
        """As :meth:`Frontier.lease`, from the shards of *sites* at once (each for its
        share of *n*), while PEEKS_PER_LEASE other shards, in turn, tell their next
        sites. The offer it returns holds the sites of a few shards (at most a quarter
        of *offer_size* from each), shards that may be ready first, the others in turn
        from one lease to the next, so that every shard is leased from and a lease
        calls a few shards, not all. Counts are the job's (as last heard from each
        shard); the control sequence and the epoch are shard 0's. *ready_in_us* is 0
        when a shard not tried may be ready (lease again), else when the first known
        one is."""
        parts = await self.shards(create=True)
        if len(parts) == 1:
            return await self.home.lease(node, n, sites, **options)
        count = len(parts)
        groups: dict[int, list[int]] = {}  # shards in the order the offer names them
        for i, site in enumerate(sites):
            groups.setdefault(shard_of(site, count), []).append(i)
        shares = dict(zip(groups, _shares(n, [len(g) for g in groups.values()]), strict=True))
        asked = [s for s in groups if shares[s]]
        peeked = [s for s in self._rotation(count) if s not in groups][:PEEKS_PER_LEASE]
        if 0 not in asked and 0 not in peeked:
            peeked.append(0)  # the job's control sequence is shard 0's

        calls: list[Awaitable[LeaseResult]] = [
            parts[s].lease(
                node, shares[s], [sites[i] for i in groups[s]], **_of_group(options, groups[s])
            )
            for s in asked
        ]
        offer_size = options["offer_size"]
        calls += [parts[s].peek(offer_size) for s in peeked]
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        now = time.monotonic()
        view = self._view(count)
        # what the shards that answered leased is the node's, even if others failed
        heard = view.hear([*asked, *peeked], outcomes, now, tried=asked)
        self._cursor = (self._cursor + 1) % count
        return LeaseResult(
            max(r.now_us for _, r in heard),
            [
                dataclasses.replace(e, rid=f"{s}:{e.rid}", clock=str(s))
                for s, r in heard
                for e in r.entries
            ],
            view.offer(self._rotation(count), offer_size, now),
            sum(view.queued),
            sum(view.leased),
            view.ready_in_us(now),
            view.control_seq,
            [site for _, r in heard for site in r.backoff_ended],
            {str(s): r.now_us for s, r in heard},
            # shard 0's (the job's), which every lease asks, unless it failed
            epoch=next((r.epoch for s, r in heard if s == 0), ""),
        )

    def _rotation(self, count: int) -> list[int]:
        """The shards in this lease's turn: from the cursor on."""
        return [(self._cursor + i) % count for i in range(count)]

    def _view(self, count: int) -> _ShardsView:
        if self._shard_view is None or len(self._shard_view.queued) != count:
            self._shard_view = _ShardsView(count)
        return self._shard_view

    # -- leases --------------------------------------------------------------------------
    async def release(self, node: str, held: Iterable[tuple[str, str]]) -> int:
        """As :meth:`Frontier.release`: each shard's leases given back to it."""
        parts = await self.shards(create=True)
        if len(parts) == 1:
            return await self.home.release(node, held)
        pairs = list(held)
        sites = dict(pairs)
        by = self._split([rid for rid, _ in pairs], len(parts))
        back = await self._each(
            [
                parts[s].release(node, [(rid, sites.get(given, "")) for given, rid in rids])
                for s, rids in enumerate(by)
                if rids
            ]
        )
        return sum(back)

    async def reclaim_expired(self, limit: int = 1000, *, grace_ms: int = 0) -> int:
        """As :meth:`Frontier.reclaim_expired`, in every shard (up to *limit* each; a
        shard's failure is raised once the others are done)."""
        parts = await self.shards()
        back = await self._each([p.reclaim_expired(limit, grace_ms=grace_ms) for p in parts])
        return sum(back)

    async def heartbeat(self, node: str, **beat: Unpack[HeartbeatOptions]) -> JobState:
        """As :meth:`Frontier.heartbeat`: shard 0 registers the node and reads the job's
        state; every other shard registers it too (so that it can reclaim the node's
        leases if it dies) and renews its leases there. Counts are the job's."""
        parts = await self.shards(create=True)
        if len(parts) == 1:
            return await self.home.heartbeat(node, **beat)
        by = self._split(beat.get("renew", ()), len(parts))
        states = await self._each(
            [
                p.heartbeat(node, fleet=s == 0, **_in_shard(beat, s, [rid for _, rid in by[s]]))
                for s, p in enumerate(parts)
            ]
        )
        return dataclasses.replace(
            states[0],
            queued=sum(max(0, st.queued) for st in states),
            leased=sum(max(0, st.leased) for st in states),
            leased_total=sum(max(0, st.leased_total) for st in states),
            waiting=sum(max(0, st.waiting) for st in states),
        )

    # -- the job's own state (shard 0) ---------------------------------------------------
    async def control_seq(self) -> int:
        return await self.home.control_seq()

    async def send_control(self, scope: str, kind: str, value: str | int) -> int:
        return await self.home.send_control(scope, kind, value)

    async def node_statuses(self) -> dict[str, dict[str, Any]]:
        return await self.home.node_statuses()

    async def changes(self, count: int = 100) -> list[tuple[str, bytes]]:
        """The newest *count* events of the job's change streams (one per shard), oldest
        first by their stream ids (Redis's clock when each was added): (stream entry id,
        event) each."""
        parts = await self.shards()
        each = await self._each([p.changes(count) for p in parts])
        merged = sorted(
            (e for events in each for e in events),
            key=lambda e: tuple(int(x) for x in e[0].split("-")),
        )
        return merged[-count:] if count > 0 else []

    async def save_summary(self, node: str, summary: dict[str, Any]) -> None:
        await self.home.save_summary(node, summary)

    async def summaries(self) -> dict[str, dict[str, Any]]:
        return await self.home.summaries()

    async def live_nodes(self) -> list[str]:
        return await self.home.live_nodes()

    async def read_seeds(self, key: str, n: int, node: str, lock_ms: int) -> SeedBatch:
        return await self.home.read_seeds(key, n, node, lock_ms)

    async def done_seeds(
        self, key: str, node: str, batch: SeedBatch, unreadable: Sequence[bytes] = ()
    ) -> int:
        return await self.home.done_seeds(key, node, batch, unreadable)

    # -- the fleet's politeness (not the job's: shard 0's client reaches it) ------------
    async def backoff(
        self, slow: Mapping[str, int | tuple[int, int]], **options: Unpack[BackoffOptions]
    ) -> dict[str, int]:
        return await self.home.backoff(slow, **options)

    async def recovered(self, sites: Iterable[str]) -> list[str]:
        return await self.home.recovered(sites)

    async def set_robots(self, delays: Mapping[str, int]) -> dict[str, int]:
        return await self.home.set_robots(delays)

    async def read_throttle(self) -> dict[str, dict[str, int]]:
        return await self.home.read_throttle()

    async def backoffs(self, sites: Iterable[str], *, half_life_ms: int) -> dict[str, int]:
        return await self.home.backoffs(sites, half_life_ms=half_life_ms)

    # -- inspection and administration ---------------------------------------------------
    async def counters(self) -> dict[str, int]:
        """The job's counters: summed over its shards (times and sequences: shard 0's)."""
        parts = await self.shards()
        return sum_counters(await self._each([p.counters() for p in parts]))

    async def sizes(self) -> dict[str, int]:
        """The job's leased requests (nodes' leases and requests waiting for their
        time), of them those waiting, sites with queued requests and entries set aside
        as malformed, over its shards (one round trip)."""
        pipe = self.client.pipeline(transaction=False)
        for part in await self.shards():
            pipe.zcard(part.keys.leases)
            pipe.zcard(part.keys.waiting)
            pipe.zcard(part.keys.sites)
            pipe.llen(part.keys.bad)
        self._own_trips += 1
        found = [int(v) for v in await pipe.execute()]
        return {
            "leased": sum(found[0::4]) + sum(found[1::4]),
            "waiting": sum(found[1::4]),
            "sites": sum(found[2::4]),
            "malformed": sum(found[3::4]),
        }

    async def seen_check(
        self, fingerprints: Sequence[bytes], *, add: bool, sites: Sequence[str] | None = None
    ) -> list[bool]:
        """As :meth:`Frontier.seen_check`; a sharded job needs each fingerprint's *site*
        (its URL's seen mark is in the site's shard)."""
        parts = await self.shards(create=add)
        if len(parts) == 1:
            return await self.home.seen_check(fingerprints, add=add)
        if sites is None or len(sites) != len(fingerprints):
            raise ValueError("a sharded job's seen-filter needs the site of each fingerprint")
        groups: list[list[int]] = [[] for _ in parts]
        for i, site in enumerate(sites):
            groups[shard_of(site, len(parts))].append(i)
        touched = [s for s, g in enumerate(groups) if g]
        found = await self._each(
            [parts[s].seen_check([fingerprints[i] for i in groups[s]], add=add) for s in touched]
        )
        out = [False] * len(fingerprints)
        for s, flags in zip(touched, found, strict=True):
            for i, flag in zip(groups[s], flags, strict=True):
                out[i] = flag
        return out

    async def join_alone(self, node: str, ttl_ms: int) -> list[str]:
        return await self.home.join_alone(node, ttl_ms)

    async def reset(self, *, keep_limits: bool = False, keep_nodes: bool = False) -> int:
        """As :meth:`Frontier.reset`, every shard (shard 0 last: its shard count goes
        with it, so an interrupted reset can be run again)."""
        parts = await self.shards()
        deleted = 0
        for p in parts[1:]:
            deleted += await p.reset(keep_limits=True)
        deleted += await self.home.reset(keep_limits=keep_limits, keep_nodes=keep_nodes)
        self._parts = None
        self.home.seen = self.seen
        return deleted
