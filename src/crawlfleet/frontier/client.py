"""Frontier operations on one job: each method is one Redis round trip (one script).

This is the only place that calls the job scripts; the scheduler, the seeding command,
``crawlfleet job`` and the benchmark all go through it. Every method may raise
``redis.exceptions.ConnectionError`` / ``TimeoutError``: callers decide how to wait.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Unpack

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from crawlfleet.exceptions import ConfigError
from crawlfleet.frontier.base import Committer
from crawlfleet.frontier.control import control_fields, desired, encode_command
from crawlfleet.frontier.records import (
    BACKOFF_OVER_MS,
    CHANGES_MAXLEN,
    FEED_KEPT,
    FEED_READ,
    PRIORITY_LIMIT,
    REVISIT_SHARE,
    WAITING,
    BackoffOptions,
    CommitBatch,
    CommitResult,
    HeartbeatOptions,
    JobState,
    LeaseAsk,
    Leased,
    LeaseOptions,
    LeaseResult,
    Pacing,
    SeedBatch,
    SeenConfig,
    SlowSites,
    backoff_left,
    check_share,
    counter_value,
    counter_values,
    entry_fault,
    offered_sites,
    parse_throttle,
    printable,
    split_entry,
)
from crawlfleet.redis.connection import REDIS_ERRORS, refuse_cluster
from crawlfleet.redis.keys import JobKeys, jobs_key, seed_keys
from crawlfleet.redis.replies import json_objects, text
from crawlfleet.redis.scripts import ScriptSet

__all__ = ["Frontier"]

logger = logging.getLogger(__name__)

#: Unused Bloom layer keys passed with each call, so that one batch can fill several
#: layers (each new layer is at least twice as large as the one before).
BLOOM_SPARES = 4
_STALE = re.compile(r"CFSTALE (\d+)")
#: Builds a script's KEYS and ARGV from the seen-filter's keys and arguments.
_Build = Callable[[list[str], list[Any]], tuple[list[str], list[Any]]]


def _leased(flat: Sequence[Any], where: str) -> list[Leased]:
    """The leased requests of a lease script's reply: rid, entry, slot, late each; their
    entries are in the hash *where*. A malformed entry comes with its fault (the node
    sets it aside)."""
    entries = []
    for i in range(0, len(flat), 4):
        fault = entry_fault(flat[i + 1])
        site, payload = ("", b"") if fault else split_entry(flat[i + 1])
        slot = int(flat[i + 2])
        late = int(flat[i + 3])
        rid = text(flat[i])
        entries.append(Leased(rid, site, payload, None if slot < 0 else slot, late, fault, where))
    return entries


def _lease_result(
    where: str,
    now: Any,
    flat: Sequence[Any],
    offer: Sequence[Any],
    queued: Any,
    leased: Any,
    ready_in: Any,
    control_seq: Any,
    ended: Sequence[Any],
    epoch: Any,
) -> LeaseResult:
    """A LeaseResult from the parts of a lease script's reply (entries in the hash
    *where*)."""
    return LeaseResult(
        int(now),
        _leased(flat, where),
        [text(s) for s in offer],
        int(queued),
        int(leased),
        int(ready_in),
        int(control_seq),
        [text(s) for s in ended],
        epoch=text(epoch),
    )


def _pace_args(sites: Sequence[str], options: LeaseOptions) -> tuple[list[Any], list[Any]]:
    """A lease's pacing arguments, and its offer (the sites' quadruples, flat), as
    lease.lua and pace.lua take them."""
    p = Pacing.of(options)
    pacing: list[Any] = [
        p.backoff_half_life_ms,
        p.robots_probe_ms,
        p.horizon_us,
        repr(float(p.late_share)),
        p.max_slots,
        p.lead_us,
    ]
    return pacing, [value for site in offered_sites(sites, options) for value in site]


def _pairs(flat: Sequence[Any]) -> dict[str, str]:
    """A flat HGETALL-style reply as a dict of text."""
    return {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat), 2)}


class Frontier(Committer):
    """The shared frontier of one job in one Redis; its change stream keeps about
    *changes_maxlen* events (at least 1); a site with both revisits and new URLs queued
    gives *revisit_share* of its requests from its revisits (0 to 1, see
    ``lua/_pop.lua``)."""

    def __init__(
        self,
        client: Redis,
        keys: JobKeys,
        seen: SeenConfig | None = None,
        *,
        changes_maxlen: int = CHANGES_MAXLEN,
        revisit_share: float = REVISIT_SHARE,
    ) -> None:
        if changes_maxlen < 1:
            raise ValueError(f"changes_maxlen must be at least 1, not {changes_maxlen}")
        self.client = client
        self.keys = keys
        self.seen = seen or SeenConfig()
        self.changes_maxlen = changes_maxlen
        self.revisit_share = check_share(revisit_share)
        self.scripts = ScriptSet(client, self.seen.mode)
        #: on a Redis Cluster the job's keys and the fleet's politeness keys are in
        #: different slots: a lease takes two or three scripts, a heartbeat two calls
        self.cluster = isinstance(client, RedisCluster)
        self._bloom_layers: int | None = None
        #: Redis round trips made through this object (for stats and the benchmark).
        self.round_trips = 0
        self.came_due = 0

    # -- seen-filter keys ----------------------------------------------------------------
    async def _seen_keys(self) -> tuple[list[str], list[Any]]:
        if self.seen.mode == "exact":
            return self.keys.seen_filter("exact"), []
        if self._bloom_layers is None:
            raw = await self.client.hget(self.keys.bloom, "layers")
            self.round_trips += 1
            self._bloom_layers = int(raw or 0)
        keys = self.keys.seen_filter("bloom", self._bloom_layers + BLOOM_SPARES)
        s = self.seen
        return keys, [
            s.bloom_capacity,
            repr(s.bloom_error_rate),
            s.bloom_growth,
            s.bloom_tightening,
        ]

    async def _with_seen(self, name: str, build: Any) -> Any:
        """Run script *name* with args from ``build(seen_keys, seen_args)``; on a stale
        Bloom layer count, refresh it and run again (the script wrote nothing)."""
        for _ in range(3):
            seen_keys, seen_args = await self._seen_keys()
            keys, args = build(seen_keys, seen_args)
            try:
                self.round_trips += 1
                return await self.scripts(name, keys, args)
            except ResponseError as exc:
                m = _STALE.search(str(exc))
                if not m:
                    raise
                self._bloom_layers = int(m.group(1))
        raise RuntimeError("Bloom filter layers kept changing under this client")

    def _note_layers(self, created: int) -> None:
        if created and self._bloom_layers is not None:
            self._bloom_layers += int(created)

    # -- queueing --------------------------------------------------------------------
    async def _commit(self, batch: CommitBatch) -> CommitResult:
        """One commit.lua call: *batch*'s acknowledgements, set-asides, revisits,
        untracks, unseen requests and known duplicates, atomically."""
        return self._committed(await self._with_seen("commit", self._commit_call(batch)))

    def _commit_call(self, batch: CommitBatch) -> _Build:
        """What builds commit.lua's KEYS and ARGV for *batch*, given the seen-filter's
        keys and arguments."""
        k = self.keys
        qindex: dict[str, int] = {}
        tail: list[Any] = []
        for r in batch.requests:
            qi = qindex.setdefault(r.site, len(qindex) + 1)
            prio = max(-PRIORITY_LIMIT, min(PRIORITY_LIMIT, r.priority))
            delay = max(0, int(r.delay_ms))
            # the common request's queue index alone: three arguments, not six
            tail += [r.fp, f"{qi}:{prio}:{delay}" if prio or delay else qi, r.payload]
        kept: list[Any] = []
        for v in batch.revisits:
            kept += [v.rid, max(0, int(v.delay_ms)), v.payload, "1" if v.new else "0", v.event]
        for u in batch.untracked:
            kept += [u.rid, u.event]

        def build(seen_keys: list[str], seen_args: list[Any]) -> tuple[list[str], list[Any]]:
            keys = k.for_commit(seen_keys, qindex)
            args = [
                batch.node,
                len(seen_keys),
                len(seen_args),
                len(batch.acks),
                len(batch.bad),
                len(batch.requests),
                WAITING,
                batch.known,
                batch.epoch,
                len(batch.revisits),
                len(batch.untracked),
                self.changes_maxlen,
                len(qindex),
                batch.feed,
                FEED_READ,
                FEED_KEPT,
                *seen_args,
                *qindex,
                *batch.acks,
                *batch.bad,
                *kept,
                *tail,
            ]
            return keys, args

        return build

    def _committed(self, reply: Sequence[Any]) -> CommitResult:
        """The CommitResult of commit.lua's *reply*."""
        queued, dups, acked, dup_idx, layers, job_epoch, counted, revisited, untracked, *fed = reply
        place, feed = fed
        self._note_layers(layers)
        return CommitResult(
            int(queued),
            int(dups),
            int(acked),
            [int(i) - 1 for i in dup_idx],
            text(job_epoch),
            int(counted),
            int(revisited),
            int(untracked),
            int(place),
            list(feed),
        )

    async def lease(
        self, node: str, n: int, sites: Sequence[str], **options: Unpack[LeaseOptions]
    ) -> LeaseResult:
        """Lease up to *n* requests from *sites* (least recently served first), as
        *options* say (:class:`~crawlfleet.frontier.records.LeaseOptions`): one script on
        one Redis; on a Redis Cluster, where the fleet's pacing keys are in a slot of
        their own, two or three (:meth:`_lease_paced`)."""
        if self.cluster:
            return await self._lease_paced(node, n, sites, options)
        self.round_trips += 1
        keys, args = self._lease_call(node, n, sites, options)
        return self._leased(await self.scripts("lease", keys, args))

    def _lease_call(
        self, node: str, n: int, sites: Sequence[str], options: LeaseOptions
    ) -> tuple[list[str], list[Any]]:
        """lease.lua's KEYS and ARGV (one Redis)."""
        pacing, offered = _pace_args(sites, options)
        share = repr(float(self.revisit_share))
        args: list[Any] = [
            node,
            options["lease_ms"],
            n,
            options["per_site"],
            options["offer_size"],
            *pacing,
            share,
            *offered,
        ]
        return self.keys.for_lease(sites), args

    def _leased(self, reply: Sequence[Any]) -> LeaseResult:
        """The LeaseResult of lease.lua's *reply*."""
        now, flat, offer, queued, leased, ready_in, control_seq, ended, epoch = reply
        return _lease_result(
            self.keys.req, now, flat, offer, queued, leased, ready_in, control_seq, ended, epoch
        )

    async def commit_lease(
        self, batch: CommitBatch, ask: LeaseAsk
    ) -> tuple[CommitResult, LeaseResult | None]:
        """The commit *batch*, then a lease as *ask* says, in one commit_lease.lua call
        (one script, one round trip: a node's round); on a Redis Cluster, where a lease
        takes several scripts, as two calls (:meth:`Committer.commit_lease`)."""
        if self.cluster:
            return await super().commit_lease(batch, ask)
        lease_keys, lease_args = self._lease_call(batch.node, ask.n, ask.sites, ask.options)
        commit_build = self._commit_call(batch)

        def build(seen_keys: list[str], seen_args: list[Any]) -> tuple[list[str], list[Any]]:
            keys, args = commit_build(seen_keys, seen_args)
            return [*keys, *lease_keys], [*args, *lease_args, len(keys), len(args)]

        committed, leased = await self._with_seen("commit_lease", build)
        return self._committed(committed), self._leased(leased)

    async def _lease_paced(
        self, node: str, n: int, sites: Sequence[str], options: LeaseOptions
    ) -> LeaseResult:
        """A lease on a Redis Cluster: reserve the sites' slots in the fleet's slot
        (pace.lua), take the requests in the job's (lease_paced.lua), give back the
        slots left unfilled (pace_return.lua)."""
        k = self.keys
        pacing, offered = _pace_args(sites, options)
        self.round_trips += 1
        now, paced, ready_in, ended = await self.scripts(
            "pace", k.fleet.for_pace(), [n, options["per_site"], *pacing, *offered]
        )
        share = repr(float(self.revisit_share))
        args: list[Any] = [node, options["lease_ms"], options["offer_size"], share]
        for site, (take, first, interval, late, *_rest) in zip(sites, paced, strict=True):
            args += [site, take, first, interval, late]
        self.round_trips += 1
        flat, taken, offer, queued, leased, control_seq, epoch = await self.scripts(
            "lease_paced", k.for_lease_paced(sites), args
        )
        unused: list[Any] = []
        for site, reserved, got in zip(sites, paced, taken, strict=True):
            take, first, interval, _late, budget, last, before, probing = reserved
            got = int(got)
            if got >= int(take) or not text(last) or (text(probing) == "1" and got > 0):
                continue
            # the budget goes back to the last slot used, or to what it was before
            last_used = int(now) + int(first) + (got - 1) * int(interval)
            restore = text(before) if got == 0 else str(last_used)
            unused += [site, text(budget), text(last), restore, text(probing)]
        if unused:
            self.round_trips += 1
            # failing, the slots stay lost to the budget; what was leased is the node's
            with contextlib.suppress(*REDIS_ERRORS):
                await self.scripts("pace_return", k.fleet.for_pace_return(), unused)
        return _lease_result(
            k.req, now, flat, offer, queued, leased, ready_in, control_seq, ended, epoch
        )

    async def peek(self, size: int) -> LeaseResult:
        """What a lease of nothing replies: up to *size* sites with queued requests, the
        queued and leased (waiting included) counts and the control sequence (one round
        trip, nothing written; a sharded job's lease asks this of its shards that have no
        site in the offer)."""
        k = self.keys
        pipe = self.client.pipeline(transaction=False)
        pipe.zrange(k.sites, 0, size - 1)
        pipe.hmget(k.counters, "queued", "control_seq", "epoch")
        pipe.zcard(k.leases)
        pipe.zcard(k.waiting)
        self.round_trips += 1
        sites, (queued, control_seq, epoch), leased, waiting = await pipe.execute()
        return LeaseResult(
            0,
            [],
            [text(s) for s in sites],
            counter_value(queued),
            int(leased) + int(waiting),
            -1,
            counter_value(control_seq),
            epoch=text(epoch) if epoch is not None else "",
        )

    async def changes(self, count: int = 100) -> list[tuple[str, bytes]]:
        """The newest *count* events of the job's change stream, oldest first: (stream
        entry id, event) each (an entry without its field "e" is skipped)."""
        self.round_trips += 1
        raw = await self.client.xrevrange(self.keys.changes, count=count)
        out: list[tuple[str, bytes]] = []
        for entry_id, fields in reversed(raw or []):
            event = (fields or {}).get(b"e")
            if isinstance(event, bytes):
                out.append((text(entry_id), event))
        return out

    async def save_summary(self, node: str, summary: dict[str, Any]) -> None:
        """Keep *node*'s end-of-run summary for ``crawlfleet job status``."""
        self.round_trips += 1
        await self.client.hset(self.keys.summaries, node, json.dumps(summary, default=str))

    async def summaries(self) -> dict[str, dict[str, Any]]:
        """Node id -> the summary it left when it closed (unreadable ones skipped)."""
        return await self._json_hash(self.keys.summaries)

    async def _json_hash(self, key: str) -> dict[str, dict[str, Any]]:
        """Field -> the JSON object stored there, of the hash *key* (fields that are not
        a JSON object skipped)."""
        self.round_trips += 1
        return json_objects(await self.client.hgetall(key))

    async def control_seq(self) -> int:
        """The sequence number of the job's newest control command (0: none yet)."""
        self.round_trips += 1
        return counter_value(await self.client.hget(self.keys.counters, "control_seq"))

    async def backoff(
        self, slow: Mapping[str, int | tuple[int, int]], **options: Unpack[BackoffOptions]
    ) -> dict[str, int]:
        """Slow sites down for every node, as *options* say (:class:`BackoffOptions`):
        *slow* maps a site to a floor (ms, e.g. its Retry-After; 0 for none), or to
        (floor, first back-off ms) to start elsewhere than *first_ms*. Returns site ->
        interval of the sites raised by this call."""
        if not slow:
            return {}
        b = SlowSites.of(slow, options)
        args: list[Any] = ["backoff", b.longest_ms, b.half_life_ms]
        for site, floor, first, latency in b.sites:
            args += [site, floor, first, "l" if latency else "s"]
        return await self._throttle_call(args)

    async def recovered(self, sites: Iterable[str]) -> list[str]:
        """These sites answer at their normal latency again: their back-offs caused by
        latency alone end. Returns the sites whose back-off ended."""
        names = list(sites)
        if not names:
            return []
        return list(await self._throttle_call(["recovered", *names]))

    async def set_robots(self, delays: Mapping[str, int]) -> dict[str, int]:
        """Record sites' robots.txt Crawl-delay (ms; 0: read, no delay) for every node."""
        if not delays:
            return {}
        args: list[Any] = ["robots"]
        for site, ms in delays.items():
            args += [site, int(ms)]
        return await self._throttle_call(args)

    async def _throttle_call(self, args: list[Any]) -> dict[str, int]:
        self.round_trips += 1
        flat = await self.scripts("throttle", self.keys.fleet.for_throttle(), args)
        return {text(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}

    async def read_throttle(self) -> dict[str, dict[str, int]]:
        """The fleet's throttle hash (every job's sites), see :func:`parse_throttle`."""
        self.round_trips += 1
        return parse_throttle(await self.client.hgetall(self.keys.fleet.throttle))

    async def backoffs(self, sites: Iterable[str], *, half_life_ms: int) -> dict[str, int]:
        """The back-off left now (ms, on Redis's clock) of those of *sites* that are
        backed off, the fleet over (for a node's progress lines: two reads, no script)."""
        names = list(dict.fromkeys(sites))
        if not names:
            return {}
        self.round_trips += 2
        seconds, micros = await self.client.time()  # apart: a cluster pipeline takes keys
        now = int(seconds) * 1000 + int(micros) // 1000
        raw = await self.client.hmget(self.keys.fleet.throttle, [f"b:{s}" for s in names])
        left = {
            site: backoff_left(r, now, half_life_ms) for site, r in zip(names, raw, strict=True)
        }
        return {site: int(ms) for site, ms in left.items() if ms >= BACKOFF_OVER_MS}

    async def offer(self, size: int) -> list[str]:
        """Up to *size* sites with queued requests, least recently served first."""
        self.round_trips += 1
        raw = await self.client.zrange(self.keys.sites, 0, size - 1)
        return [text(s) for s in raw]

    # -- leases ----------------------------------------------------------------------
    async def _requeue(self, mode: str, node: str, held: Iterable[tuple[str, str]]) -> int:
        k = self.keys
        qindex: dict[str, int] = {}
        args: list[Any] = [mode, node, WAITING]
        for rid, site in held:
            qi = qindex.setdefault(site, len(qindex) + 1) if site else 0
            args += [rid, qi]
        if len(args) == 3:
            return 0
        self.round_trips += 1
        back, waited, set_aside = await self.scripts("requeue", k.for_requeue(qindex), args)
        for i in range(0, len(set_aside), 2):
            logger.error(
                "Malformed frontier entry %s in %s set aside to %s (job %s): %s",
                text(set_aside[i]),
                k.req,
                k.bad,
                k.job,
                printable(set_aside[i + 1]),
            )
        self.came_due += int(waited)
        return int(back) - int(waited)

    async def reclaim_expired(self, limit: int = 1000, *, grace_ms: int = 0) -> int:
        """Return leases past their deadline, and every lease of a node that missed its
        heartbeats, to their queues; the number returned. Nothing, for *grace_ms* after
        the whole fleet was silent (a Redis outage or hang: live nodes renew first)."""
        self.round_trips += 1
        flat = await self.scripts("expired", self.keys.for_expired(), [limit, grace_ms, WAITING])
        pairs = [(text(flat[i]), text(flat[i + 1])) for i in range(0, len(flat), 2)]
        return await self._requeue("expired", "", pairs)

    async def release(self, node: str, held: Iterable[tuple[str, str]]) -> int:
        """Give back leases *node* holds (rid, site) to their queues, at their place."""
        return await self._requeue("owner", node, held)

    async def heartbeat(
        self, node: str, *, fleet: bool = True, **beat: Unpack[HeartbeatOptions]
    ) -> JobState:
        """Register *node* as alive, renew its leases, read the job's state, as *beat*
        says (status "leaving" removes the node from the registry). Without *fleet*, the
        fleet's limits are not read (``fleet_limits`` empty: a shard other than 0)."""
        k = self.keys
        # the fleet's limits are in another slot on a cluster: read apart
        keys = k.for_heartbeat(fleet_limits=fleet and not self.cluster)
        self.round_trips += 1
        busy, renew = "1" if beat["busy"] else "0", beat.get("renew", ())
        args = [node, beat["ttl_ms"], beat["status"], busy, beat["lease_ms"], *renew]
        reply = await self.scripts("heartbeat", keys, args)
        now, queued, leased, live, busy_others, _renewed, limits, control, ever, shared, waiting = (
            reply
        )
        if fleet and self.cluster:
            self.round_trips += 1
            raw = await self.client.hgetall(k.fleet.limits)
            shared = [v for kv in raw.items() for v in kv]
        return JobState(
            int(now),
            int(queued),
            int(leased),
            int(live),
            int(busy_others),
            _pairs(limits),
            desired(dict(zip(control_fields(node), control, strict=True))),
            int(ever),
            _pairs(shared),
            int(waiting),
        )

    async def send_control(self, scope: str, kind: str, value: str | int) -> int:
        """Ask the nodes of this job (*scope* "*") or one node (its id) for a state
        ("running", "paused", "draining", "stopped") or a concurrency; returns the
        command's sequence number, which nodes acknowledge in their status."""
        stored = encode_command(kind, value)
        if not scope or any(c in scope for c in ": \t\r\n"):
            raise ConfigError(f"node id {scope!r} is not valid (no colon or whitespace)")
        self.round_trips += 1
        return int(
            await self.scripts("control", self.keys.for_control(), [f"{scope}:{kind}", stored])
        )

    async def node_statuses(self) -> dict[str, dict[str, Any]]:
        """Node id -> the status JSON it published last (unreadable ones skipped)."""
        return await self._json_hash(self.keys.nodeinfo)

    # -- seed lists (scrapy-redis compatible) ---------------------------------------
    async def read_seeds(self, key: str, n: int, node: str, lock_ms: int) -> SeedBatch:
        """Up to *n* entries of the seed key *key*, left in place; *node* reads the key
        alone until :meth:`done_seeds` or for *lock_ms*.

        A key that does not exist (the usual case: every node looks for its seed key
        about once a second, and most jobs never get seeds that way) is answered by one
        EXISTS, not the script: a script call costs Redis many times a command."""
        self.round_trips += 1
        if not await self.client.exists(key):
            return SeedBatch("none", 0, [])
        reply = await self.scripts(
            "seeds_read", seed_keys(key).for_seeds_read(), [node, n, lock_ms]
        )
        entries = [e if isinstance(e, bytes) else str(e).encode() for e in reply[2:]]
        return SeedBatch(text(reply[0]), int(reply[1]), entries)

    async def done_seeds(
        self, key: str, node: str, batch: SeedBatch, unreadable: Sequence[bytes] = ()
    ) -> int:
        """Remove *batch* (queued by *node*) from *key*, set *unreadable* aside."""
        self.round_trips += 1
        return int(
            await self.scripts(
                "seeds_done",
                seed_keys(key).for_seeds_done(),
                [node, batch.kind, len(batch.entries), *batch.entries, *unreadable],
            )
        )

    # -- inspection and administration -----------------------------------------------
    async def seen_check(self, fingerprints: Sequence[bytes], *, add: bool) -> list[bool]:
        """For each fingerprint: was it seen before? With *add*, record the new ones."""

        def build(seen_keys: list[str], seen_args: list[Any]) -> tuple[list[str], list[Any]]:
            return seen_keys, ["add" if add else "check", len(seen_args), *seen_args, *fingerprints]

        _hits, layers, flags = await self._with_seen("seen", build)
        self._note_layers(layers)
        return [c == ord("1") for c in flags]

    async def counters(self) -> dict[str, int]:
        self.round_trips += 1
        return counter_values(await self.client.hgetall(self.keys.counters))

    async def register_job(self) -> None:
        """List the job in this Redis (a node's first call: CommandFailed when its
        client is a plain one of a Redis Cluster node, see refuse_cluster)."""
        await refuse_cluster(self.client)
        self.round_trips += 1
        await self.client.sadd(jobs_key(self.keys.prefix), self.keys.job)

    async def live_nodes(self) -> list[str]:
        now_s, now_us = await self.client.time()
        now = int(now_s) * 1000 + int(now_us) // 1000
        return [text(n) for n in await self.client.zrangebyscore(self.keys.nodes, now, "+inf")]

    async def join_alone(self, node: str, ttl_ms: int) -> list[str]:
        """Register *node* as alive for *ttl_ms* unless other nodes are alive on the
        job (one step): those nodes, else [] (registered)."""
        self.round_trips += 1
        reply = await self.scripts("join_alone", self.keys.for_join_alone(), [node, ttl_ms])
        return [text(n) for n in reply]

    async def reset(self, *, keep_limits: bool = False, keep_nodes: bool = False) -> int:
        """Delete every key of the job (queues, leases, seen-filter, counters, control
        commands, run-time rate limits and its place in the list of jobs unless
        *keep_limits*; the registry of live nodes unless *keep_nodes*).

        The caller makes sure no node works on the job. Returns the keys deleted."""
        k = self.keys
        sites = [text(s) for s in await self.client.zrange(k.sites, 0, -1)]
        layers = int(await self.client.hget(k.bloom, "layers") or 0)
        kept = {k.nodes, k.nodeinfo} if keep_nodes else set()
        doomed = [
            *(key for key in k.fixed() if key not in kept),
            *(() if keep_limits else (k.limits,)),
            *(key for s in sites for key in k.site_queues(s)),
            *(k.bloom_layer(i) for i in range(1, layers + 1)),
        ]
        deleted = 0
        for i in range(0, len(doomed), 500):
            deleted += int(await self.client.delete(*doomed[i : i + 500]))
        if not keep_limits:  # kept limits are the job's state: it stays listed
            await self.client.srem(jobs_key(k.prefix), k.job)
        self._bloom_layers = None
        return deleted
