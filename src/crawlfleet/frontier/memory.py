"""One job's frontier in this process's memory, with the Redis frontier's semantics.

For tests and tools that want a node's parts without a Redis: the same queues
(priority, then first in first out, per site; sites served in turn), seen-filter
(exact; a "bloom" job keeps exact fingerprints here), leases with owners and
deadlines, heartbeats, reclaiming, control commands, pacing slots, back-off and
robots.txt delays. It passes the contract tests that the Redis frontier passes
(tests/frontier/test_frontier_scripts.py). It is not shared between processes and
keeps nothing: a node that uses it is a fleet of one.
"""

from __future__ import annotations

import heapq
import json
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Unpack

from crawlfleet.exceptions import ConfigError
from crawlfleet.frontier.base import Committer
from crawlfleet.frontier.control import control_fields, desired, encode_command
from crawlfleet.frontier.records import (
    BACKOFF_OVER_MS,
    CHANGES_MAXLEN,
    FEED_KEPT,
    FEED_READ,
    REVISIT_SHARE,
    BackoffOptions,
    CommitBatch,
    CommitResult,
    HeartbeatOptions,
    JobState,
    Leased,
    LeaseOptions,
    LeaseResult,
    Pacing,
    SeedBatch,
    SlowSites,
    check_share,
    offered_sites,
)
from crawlfleet.redis.keys import seed_keys
from crawlfleet.redis.replies import json_object

__all__ = ["MemoryFrontier"]

#: Nodes dead for longer than this are forgotten (as heartbeat.lua does).
FORGET_MS = 3_600_000
#: A back-off decayed below this is over (as lease.lua does).


def _now_us() -> int:
    return time.time_ns() // 1000


@dataclass
class _Entry:
    score: tuple[int, int]  # (-priority, sequence)
    site: str
    payload: bytes
    revisit: bool = False  # kept for a later visit (commit.lua's mark)


@dataclass
class _Job:
    seq: int = 0
    served: int = 0
    seen: set[bytes] = field(default_factory=set)
    entries: dict[str, _Entry] = field(default_factory=dict)  # rid -> entry
    queues: dict[str, list[tuple[tuple[int, int], str]]] = field(default_factory=dict)
    #: site -> rids of its revisits whose time came, first due first
    revisits: dict[str, deque[str]] = field(default_factory=dict)
    credit: dict[str, float] = field(default_factory=dict)  # site -> revisit credit
    sites: dict[str, int] = field(default_factory=dict)  # site -> serve order
    leases: dict[str, int] = field(default_factory=dict)  # rid -> deadline ms
    owner: dict[str, str] = field(default_factory=dict)  # rid -> node
    waiting: dict[str, int] = field(default_factory=dict)  # rid -> due time ms
    counters: dict[str, int] = field(default_factory=dict)
    bad: list[bytes] = field(default_factory=list)
    nodes: dict[str, int] = field(default_factory=dict)  # node -> alive until ms
    nodeinfo: dict[str, str] = field(default_factory=dict)
    busy: dict[str, int] = field(default_factory=dict)  # node -> busy until ms
    reaped: set[str] = field(default_factory=set)
    beat_at: int = 0
    resumed_at: int = 0
    limits: dict[str, str] = field(default_factory=dict)
    control: dict[str, str] = field(default_factory=dict)
    summaries: dict[str, str] = field(default_factory=dict)
    seeds: dict[str, list[bytes]] = field(default_factory=dict)
    #: the change stream: (entry id "<ms>-<n>", event), oldest first
    changes: list[tuple[str, bytes]] = field(default_factory=list)
    #: the newest fingerprints commits added to the seen-filter (counter "fed": all)
    feed: list[bytes] = field(default_factory=list)


@dataclass
class _Fleet:
    """Politeness state every job of a store shares (as the ``{polite}`` keys in Redis)."""

    limits: dict[str, str] = field(default_factory=dict)
    pace: dict[str, int] = field(default_factory=dict)  # budget -> last slot µs
    backoffs: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # ms, at, cause
    robots: dict[str, tuple[int, int]] = field(default_factory=dict)  # delay ms, known at
    probes: dict[str, int] = field(default_factory=dict)  # site -> probe end ms


#: The store's entry for the shared politeness state (no job name has a space).
_FLEET = " polite"


class MemoryFrontier(Committer):
    """A job's frontier in memory (see the module docstring). Frontiers made with
    the same *store* dict and *job* share it, as nodes share a Redis. Its change stream
    keeps the *changes_maxlen* newest events; a site gives *revisit_share* of its
    requests from its revisits when it has new URLs queued too (see lua/_pop.lua)."""

    def __init__(
        self,
        job: str = "job",
        store: dict[str, Any] | None = None,
        *,
        changes_maxlen: int = CHANGES_MAXLEN,
        revisit_share: float = REVISIT_SHARE,
    ) -> None:
        if changes_maxlen < 1:
            raise ValueError(f"changes_maxlen must be at least 1, not {changes_maxlen}")
        self.job = job
        self.changes_maxlen = changes_maxlen
        self.revisit_share = check_share(revisit_share)
        shared = store if store is not None else {}
        self._job: _Job = shared.setdefault(job, _Job())
        self._fleet: _Fleet = shared.setdefault(_FLEET, _Fleet())
        self.round_trips = 0
        self.came_due = 0

    # -- helpers -----------------------------------------------------------------------
    def _count(self, name: str, n: int) -> None:
        if n:
            self._job.counters[name] = self._job.counters.get(name, 0) + n

    def _enqueue(self, rid: str, entry: _Entry) -> None:
        j = self._job
        heapq.heappush(j.queues.setdefault(entry.site, []), (entry.score, rid))
        j.sites.setdefault(entry.site, 0)

    def _backoff_left(self, site: str, now_ms: int, half_life: int) -> tuple[float, int, str]:
        raw = self._fleet.backoffs.get(site)
        if raw is None:
            return 0.0, 0, ""
        ms, at, cause = raw
        return ms * 0.5 ** (max(0, now_ms - at) / max(1, half_life)), at, cause

    # -- queueing ----------------------------------------------------------------------
    async def register_job(self) -> None:
        self.round_trips += 1

    async def _commit(self, batch: CommitBatch) -> CommitResult:
        self.round_trips += 1
        j = self._job
        job_epoch = str(j.counters.setdefault("epoch", _now_us()))  # as commit.lua
        counted = batch.known if batch.epoch == job_epoch else 0
        acked = 0
        for rid in batch.acks:
            if j.owner.get(rid) == batch.node:
                j.leases.pop(rid, None)
                j.owner.pop(rid, None)
                j.entries.pop(rid, None)
                acked += 1
        set_aside = 0
        for rid in batch.bad:
            if j.owner.get(rid) == batch.node:
                entry = j.entries.pop(rid, None)
                if entry is not None:
                    j.bad.append(entry.payload)
                j.leases.pop(rid, None)
                j.owner.pop(rid, None)
                set_aside += 1
        revisited = tracked = dropped = 0
        for v in batch.revisits:  # kept under its rid, waiting (see commit.lua)
            if j.owner.get(v.rid) != batch.node:
                continue
            kept = j.entries.get(v.rid)
            if kept is None:
                j.leases.pop(v.rid, None)
                j.owner.pop(v.rid, None)
                dropped += 1
                continue
            kept.payload = v.payload
            kept.revisit = True
            j.leases.pop(v.rid, None)
            j.owner.pop(v.rid, None)
            j.waiting[v.rid] = _now_us() // 1000 + max(0, v.delay_ms)
            revisited += 1
            tracked += v.new
            self._note_change(v.event)
        untracked = 0
        for u in batch.untracked:
            if j.owner.get(u.rid) == batch.node:
                j.leases.pop(u.rid, None)
                j.owner.pop(u.rid, None)
                j.entries.pop(u.rid, None)
                untracked += 1
                self._note_change(u.event)
        place, feed = self._read_feed(batch, job_epoch)
        queued, waiting, dup_idx, added = 0, 0, [], []
        for i, r in enumerate(batch.requests):
            if r.fp and r.fp in j.seen:
                dup_idx.append(i)
                continue
            if r.fp:
                j.seen.add(r.fp)
                added.append(r.fp)
            j.seq += 1
            rid = str(j.seq)
            entry = _Entry((-r.priority, j.seq), r.site, r.payload)
            j.entries[rid] = entry
            if r.delay_ms > 0:  # waits in the waiting set (see commit.lua)
                j.waiting[rid] = _now_us() // 1000 + r.delay_ms
                waiting += 1
            else:
                self._enqueue(rid, entry)
                queued += 1
        self._count("queued", queued)
        self._count("enqueued", queued + waiting)
        self._count("leased", waiting)
        self._count("waiting", waiting)
        self._count("duplicates", len(dup_idx) + counted)
        self._count("leased", -(acked + set_aside + untracked + dropped))
        self._count("acked", acked + revisited + untracked)
        self._count("bad", set_aside)
        self._count("waiting", revisited)
        self._count("revisits", revisited - tracked)  # a page's first keeping is no revisit
        if tracked - untracked:
            j.counters["tracked"] = max(0, j.counters.get("tracked", 0) + tracked - untracked)
        if place >= 0 and added:  # as commit.lua
            fed = j.counters.get("fed", 0)
            j.feed += added
            if len(j.feed) > FEED_KEPT + FEED_KEPT // 8:
                del j.feed[:-FEED_KEPT]
            if place == fed:
                place = fed + len(added)
            self._count("fed", len(added))
        return CommitResult(
            queued + waiting,
            len(dup_idx),
            acked,
            dup_idx,
            job_epoch,
            counted,
            revisited,
            untracked,
            place,
            feed,
        )

    def _read_feed(self, batch: CommitBatch, job_epoch: str) -> tuple[int, list[bytes]]:
        """The node's next place in the job's feed and the fingerprints read there, as
        commit.lua reads them (-1 and none when the node keeps no cache)."""
        place, j = batch.feed, self._job
        if place < 0:
            return -1, []
        fed = j.counters.get("fed", 0)
        if batch.epoch != job_epoch or place > fed:
            place = 0
        first = fed - len(j.feed)
        place = max(place, first)
        n = min(fed - place, FEED_READ)
        return place + n, j.feed[place - first : place - first + n]

    def _note_change(self, event: bytes) -> None:
        """Append *event* (b"": none) to the job's change stream, counted "changes"."""
        if not event:
            return
        stream = self._job.changes
        ms, n = _now_us() // 1000, 0
        if stream:
            last_ms, _, last_n = stream[-1][0].partition("-")
            if int(last_ms) >= ms:
                ms, n = int(last_ms), int(last_n) + 1
        stream.append((f"{ms}-{n}", event))
        del stream[: max(0, len(stream) - self.changes_maxlen)]
        self._count("changes", 1)

    async def changes(self, count: int = 100) -> list[tuple[str, bytes]]:
        """The newest *count* events of the job's change stream, oldest first."""
        return list(self._job.changes[-count:]) if count > 0 else []

    async def offer(self, size: int) -> list[str]:
        self.round_trips += 1
        return self._offer(size)

    def _offer(self, size: int) -> list[str]:
        order = sorted(self._job.sites.items(), key=lambda kv: (kv[1], kv[0]))
        return [site for site, _ in order[:size]]

    # -- leasing -----------------------------------------------------------------------
    async def lease(
        self, node: str, n: int, sites: Sequence[str], **options: Unpack[LeaseOptions]
    ) -> LeaseResult:
        self.round_trips += 1
        j, f = self._job, self._fleet
        p = Pacing.of(options)
        lease_ms, per_site = options["lease_ms"], options["per_site"]
        now = _now_us()
        now_ms = now // 1000
        out: list[Leased] = []
        ready_in = -1
        ended: list[str] = []
        for site, configured, budget, site_late in offered_sites(sites, options):
            if len(out) >= n:
                break
            left, _at, _cause = self._backoff_left(site, now_ms, p.backoff_half_life_ms)
            if site in f.backoffs and left < BACKOFF_OVER_MS:
                del f.backoffs[site]
                ended.append(site)
                left = 0.0
            robots = f.robots.get(site)
            probing = p.robots_probe_ms > 0 and robots is None
            delay_ms, known_ms = robots if robots is not None else (0, 0)
            interval = max(configured, delay_ms * 1000, int(left) * 1000)
            if interval > configured:
                site_late = max(site_late, int(interval * p.late_share))
                budget = budget.split("|job=", 1)[0]  # the site's delay holds for every job
            take = min(per_site, n - len(out))
            first = now
            if probing:
                probe_end = f.probes.get(site, 0)
                if probe_end > now_ms:
                    wait = (probe_end - now_ms) * 1000
                    ready_in = wait if ready_in < 0 else min(ready_in, wait)
                    take = 0
                else:
                    take = 1
            elif interval > 0:
                last = f.pace.get(budget)
                first = now + p.lead_us
                if last is not None:
                    first = max(first, last + interval)
                if robots is not None:
                    first = max(first, known_ms * 1000 + interval)
                if first > now + p.horizon_us:
                    wait = first - now - p.horizon_us
                    ready_in = wait if ready_in < 0 else min(ready_in, wait)
                    take = 0
                else:
                    take = min(take, p.max_slots, (now + p.horizon_us - first) // interval + 1)
            if take <= 0 or site not in j.sites:
                continue
            queue = j.queues.get(site, [])
            revisits = j.revisits.get(site, deque())
            got = taken_revisits = 0
            for revisit in self._share_out(site, take, len(revisits), len(queue)):
                if revisit:
                    rid = revisits.popleft()
                    taken_revisits += 1
                else:
                    _score, rid = heapq.heappop(queue)
                entry = j.entries.get(rid)
                if entry is None:
                    continue
                j.leases[rid] = now_ms + lease_ms
                j.owner[rid] = node
                if interval > 0 and not probing:
                    out.append(
                        Leased(rid, site, entry.payload, first + got * interval - now, site_late)
                    )
                else:
                    out.append(Leased(rid, site, entry.payload))
                got += 1
            self._count("queued", -got)
            self._count("revisits_queued", -taken_revisits)
            if queue or revisits:
                j.served += 1
                j.sites[site] = j.served
            else:
                j.queues.pop(site, None)
                j.revisits.pop(site, None)
                j.sites.pop(site, None)
            if got and interval > 0 and not probing:
                f.pace[budget] = first + (got - 1) * interval
            if got and probing:
                f.probes[site] = now_ms + p.robots_probe_ms
        self._count("leased", len(out))
        self._count("leased_total", len(out))
        return LeaseResult(
            now,
            out,
            self._offer(options["offer_size"]),
            j.counters.get("queued", 0),
            len(j.leases) + len(j.waiting),
            ready_in,
            j.counters.get("control_seq", 0),
            ended,
            epoch=str(j.counters.get("epoch", "")),
        )

    def _share_out(self, site: str, take: int, revisits: int, news: int) -> list[bool]:
        """Of *take* requests of *site*: True (a revisit) or False, in order, by the share
        rule of lua/_pop.lua (its credit kept while both queues have requests)."""
        credit = self._job.credit.get(site, 0.0)
        kinds: list[bool] = []
        r = n = 0
        while r + n < take and (r < revisits or n < news):
            if r < revisits and n < news:
                credit += self.revisit_share
                revisit = credit >= 1 - 1e-9
                if revisit:
                    credit -= 1
            else:
                revisit = r < revisits
            kinds.append(revisit)
            r, n = r + revisit, n + (not revisit)
        if r < revisits and n < news:
            self._job.credit[site] = credit
        else:
            self._job.credit.pop(site, None)
        return kinds

    async def release(self, node: str, held: Iterable[tuple[str, str]]) -> int:
        self.round_trips += 1
        return self._requeue(
            [rid for rid, _site in held], lambda rid, _now: self._job.owner.get(rid) == node
        )

    async def reclaim_expired(self, limit: int = 1000, *, grace_ms: int = 0) -> int:
        self.round_trips += 1
        j = self._job
        now = _now_us() // 1000
        # waiting requests whose time has come, grace or not (as expired.lua)
        came = sorted((due, rid) for rid, due in j.waiting.items() if due < now)[:limit]
        picked = [rid for _, rid in came]
        if now - j.resumed_at >= grace_ms:
            picked += [rid for rid, deadline in j.leases.items() if deadline < now][:limit]
            dead = {n for n, until in j.nodes.items() if until < now and n not in j.reaped}
            if dead:
                held = [rid for rid, owner in j.owner.items() if owner in dead]
                picked += [rid for rid in held if rid not in picked]
                j.reaped |= dead
        picked = picked[: 2 * limit]

        def gone(rid: str, now_ms: int) -> bool:
            holder = j.owner.get(rid)
            return j.leases[rid] < now_ms or holder is None or j.nodes.get(holder, 0) < now_ms

        return self._requeue(picked, gone)

    def _requeue(self, rids: Iterable[str], ok: Any) -> int:
        """Queue again those of *rids* that wait and whose time has come, and those
        leased for which ``ok(rid, now_ms)``; the leases returned (not the waiting)."""
        j = self._job
        now = _now_us() // 1000
        back = due = 0
        fronts: dict[str, list[str]] = {}  # site -> revisit leases returned
        for rid in rids:
            if rid in j.waiting:
                if j.waiting[rid] >= now:
                    continue
                del j.waiting[rid]
                self._count("waiting", -1)
                waited = True
            elif rid in j.leases and ok(rid, now):
                j.leases.pop(rid, None)
                j.owner.pop(rid, None)
                waited = False
            else:
                continue
            entry = j.entries.get(rid)
            if entry is None:
                self._count("leased", -1)
                continue
            if entry.revisit:  # its site's revisit list: due at the back, returned at the head
                if waited:
                    j.revisits.setdefault(entry.site, deque()).append(rid)
                else:
                    fronts.setdefault(entry.site, []).append(rid)
                j.sites.setdefault(entry.site, 0)
                self._count("revisits_queued", 1)
            else:
                if waited:  # a retry whose wait is over joins the back of its priority
                    j.seq += 1
                    entry.score = (entry.score[0], j.seq)
                self._enqueue(rid, entry)
            back += 1
            due += waited
        for site, returned in fronts.items():
            returned.sort(key=lambda rid: j.entries[rid].score[1], reverse=True)
            j.revisits.setdefault(site, deque()).extendleft(returned)
        self.came_due += due
        self._count("leased", -back)
        self._count("queued", back)
        self._count("requeued", back - due)
        return back - due

    # -- nodes and control -------------------------------------------------------------------
    async def live_nodes(self) -> list[str]:
        now = _now_us() // 1000
        return [n for n, until in self._job.nodes.items() if until >= now]

    async def join_alone(self, node: str, ttl_ms: int) -> list[str]:
        others = [n for n in await self.live_nodes() if n != node]
        if not others:
            self._job.nodes[node] = _now_us() // 1000 + ttl_ms
        return others

    async def reset(self, *, keep_limits: bool = False, keep_nodes: bool = False) -> int:
        """Forget the job's crawl state (its seed lists are the user's, its change
        stream output: kept)."""
        seeds, nodes, changes = self._job.seeds, self._job.nodes, self._job.changes
        self._job.__init__()  # type: ignore[misc]  # in place: other frontiers share it
        self._job.seeds, self._job.changes = seeds, changes
        if keep_nodes:
            self._job.nodes = nodes
        return 1

    async def heartbeat(self, node: str, **beat: Unpack[HeartbeatOptions]) -> JobState:
        self.round_trips += 1
        j = self._job
        now = _now_us() // 1000
        ttl_ms, status, busy = beat["ttl_ms"], beat["status"], beat["busy"]
        if now - j.beat_at > ttl_ms:
            j.resumed_at = now
        j.beat_at = now
        if status == "leaving":
            j.nodes.pop(node, None)
            j.nodeinfo.pop(node, None)
            j.busy.pop(node, None)
        else:
            j.nodes[node] = now + ttl_ms
            j.nodeinfo[node] = status
            j.reaped.discard(node)
            if busy:
                j.busy[node] = now + ttl_ms
            else:
                j.busy.pop(node, None)
        for rid in beat.get("renew", ()):
            if j.owner.get(rid) == node and rid in j.leases:
                j.leases[rid] = now + beat["lease_ms"]
        for old in [n for n, until in j.nodes.items() if until < now - FORGET_MS]:
            j.nodes.pop(old, None)
            j.nodeinfo.pop(old, None)
            j.reaped.discard(old)
        j.busy = {n: until for n, until in j.busy.items() if until > now}
        busy_others = len(j.busy) - (1 if busy and status != "leaving" else 0)
        fields = control_fields(node)
        return JobState(
            now,
            j.counters.get("queued", 0),
            len(j.leases) + len(j.waiting),
            sum(1 for until in j.nodes.values() if until >= now),
            busy_others,
            dict(j.limits),
            desired({name: j.control.get(name) for name in fields}),
            j.counters.get("leased_total", 0),
            dict(self._fleet.limits),
            j.counters.get("waiting", 0),
        )

    async def control_seq(self) -> int:
        self.round_trips += 1
        return self._job.counters.get("control_seq", 0)

    async def send_control(self, scope: str, kind: str, value: str | int) -> int:
        """As :meth:`crawlfleet.frontier.client.Frontier.send_control`."""
        stored = encode_command(kind, value)
        if not scope or any(c in scope for c in ": \t\r\n"):
            raise ConfigError(f"node id {scope!r} is not valid (no colon or whitespace)")
        self.round_trips += 1
        self._count("control_seq", 1)
        seq = self._job.counters["control_seq"]
        self._job.control[f"{scope}:{kind}"] = json.dumps(
            {"seq": seq, "value": stored, "at": _now_us() // 1000}
        )
        return seq

    async def set_limits(self, limits: Mapping[str, str], *, fleet: bool = False) -> None:
        """Set the job's own run-time rate limits (site pattern -> "H/Ws"), or with
        *fleet* those every job shares."""
        (self._fleet.limits if fleet else self._job.limits).update(limits)

    async def counters(self) -> dict[str, int]:
        return dict(self._job.counters)

    async def node_statuses(self) -> dict[str, dict[str, Any]]:
        return _json_objects(self._job.nodeinfo)

    async def save_summary(self, node: str, summary: dict[str, Any]) -> None:
        self.round_trips += 1
        self._job.summaries[node] = json.dumps(summary, default=str)

    async def summaries(self) -> dict[str, dict[str, Any]]:
        return _json_objects(self._job.summaries)

    # -- seeds ---------------------------------------------------------------------------
    async def push_seeds(self, key: str, entries: Iterable[bytes]) -> None:
        """Add *entries* to the seed list *key* (as ``crawlfleet seed --list`` does)."""
        self._job.seeds.setdefault(key, []).extend(entries)

    async def read_seeds(self, key: str, n: int, node: str, lock_ms: int) -> SeedBatch:
        self.round_trips += 1
        listed = self._job.seeds.get(key)
        if not listed:
            return SeedBatch("none", 0, [])
        return SeedBatch("list", len(listed), list(listed[:n]))

    async def done_seeds(
        self, key: str, node: str, batch: SeedBatch, unreadable: Sequence[bytes] = ()
    ) -> int:
        self.round_trips += 1
        listed = self._job.seeds.get(key, [])
        removed = 0
        for entry in batch.entries:
            if entry in listed:
                listed.remove(entry)
                removed += 1
        self._job.seeds.setdefault(seed_keys(key).unreadable, []).extend(unreadable)
        return removed

    # -- sites ---------------------------------------------------------------------------
    async def backoff(
        self, slow: Mapping[str, int | tuple[int, int]], **options: Unpack[BackoffOptions]
    ) -> dict[str, int]:
        self.round_trips += 1
        b = SlowSites.of(slow, options)
        now = _now_us() // 1000
        raised_now: dict[str, int] = {}
        for site, floor, first, latency in b.sites:
            current, at, was = self._backoff_left(site, now, b.half_life_ms)
            if current < BACKOFF_OVER_MS:
                was = ""
            cause = was if was == "s" else ("l" if latency else "s")
            if current >= BACKOFF_OVER_MS and now - at < current and cause != was:
                ms, set_at, _ = self._fleet.backoffs[site]
                self._fleet.backoffs[site] = (ms, set_at, cause)
            if current < BACKOFF_OVER_MS or now - at >= current:
                raised = int(max(min(b.longest_ms, max(first, current * 2)), floor))
                self._fleet.backoffs[site] = (raised, now, cause)
                raised_now[site] = raised
        return raised_now

    async def recovered(self, sites: Iterable[str]) -> list[str]:
        self.round_trips += 1
        ended = []
        for site in sites:
            raw = self._fleet.backoffs.get(site)
            if raw is not None and raw[2] == "l":
                del self._fleet.backoffs[site]
                ended.append(site)
        return ended

    async def set_robots(self, delays: Mapping[str, int]) -> dict[str, int]:
        if not delays:
            return {}
        self.round_trips += 1
        now = _now_us() // 1000
        for site, ms in delays.items():
            self._fleet.robots[site] = (int(ms), now)
            self._fleet.probes.pop(site, None)
        return {site: int(ms) for site, ms in delays.items()}


def _json_objects(fields: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Field -> its JSON object, as the Redis frontier reads a hash of them (fields that
    are not one skipped)."""
    return {name: doc for name, raw in fields.items() if (doc := json_object(raw)) is not None}
