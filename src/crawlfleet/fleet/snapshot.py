"""One job's state at one moment, read from Redis (nothing written): what
``crawlfleet status`` and ``health`` print and the manager's API serves.

For a job: nodes alive or dead (their registry deadline against Redis's clock) with the
figures each publishes in the job's ``nodeinfo`` hash, queued and leased counts, the
longest site queues, entries set aside as malformed, and an ETA (work left over the
summed pages per second of live nodes, never less than the slowest site's queue takes at
its rate limit).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from scrapy.settings import BaseSettings

from crawlfleet.fleet.freshness import Freshness, job_freshness
from crawlfleet.fleet.jobs import list_jobs, require_job
from crawlfleet.frontier.config import rate_limit_margin
from crawlfleet.frontier.control import ALL_NODES, desired
from crawlfleet.frontier.limits import Budgets, RateLimits
from crawlfleet.frontier.records import (
    MAX_SHARDS,
    counter_value,
    counter_values,
    parse_throttle,
)
from crawlfleet.frontier.sharded import JobFrontier, interleave, shard_of, sum_counters
from crawlfleet.redis.keys import JobKeys
from crawlfleet.redis.replies import json_objects, node_statuses, text
from crawlfleet.settings.access import get_dict

__all__ = [
    "JOBS_MAX",
    "SITES_SCANNED",
    "TOP_SITES",
    "JobSnapshot",
    "configured_limits",
    "job_names",
    "job_nodes",
    "redis_now_ms",
    "snapshot",
    "snapshots",
]

#: Site queues shown, longest first.
TOP_SITES = 20
#: Site queues measured at most per job (in serve order) to find the longest ones.
SITES_SCANNED = 1000
#: Jobs shown at most when no job is named.
JOBS_MAX = 100


@dataclass(frozen=True)
class JobSnapshot:
    """One job's state at one moment (``now_ms``: Redis's clock)."""

    job: str
    now_ms: int
    queued: int
    #: requests out of the queues and not finished: leased to a node, or waiting for
    #: their time (*waiting*)
    leased: int
    overdue_leases: int  #: nodes' leases whose deadline has passed (waiting ones not)
    oldest_deadline_ms: int | None  #: the earliest deadline of a node's lease
    sites: int
    top_sites: list[tuple[str, int]]
    sites_scanned: int
    malformed: int
    nodes: dict[str, dict[str, Any]]  #: node id -> {"alive", "expires_in_s", **status}
    #: commands for every node of the job: kind ("state", "concurrency") -> value
    job_control: dict[str, str] = field(default_factory=dict)
    #: site -> back-off interval (ms) as last raised (it decays from there)
    backoff: dict[str, int] = field(default_factory=dict)
    #: site -> robots.txt Crawl-delay (ms), sites that have one
    robots: dict[str, int] = field(default_factory=dict)
    #: the longest a site's queue takes at its rate limit (s), and that site
    polite_seconds: float = 0.0
    polite_site: str | None = None
    #: site of top_sites -> its rate limit (requests/s), sites that have one
    site_limits: dict[str, float] = field(default_factory=dict)
    #: the shards the job's queues, leases and seen-filter are split over
    shards: int = 1
    #: of *leased*, requests waiting for their time (a retry's back-off, a tracked
    #: request between visits), and of them those whose time has come (the next
    #: reclaim queues them)
    waiting: int = 0
    waiting_due: int = 0
    #: a continuous job's freshness (None: it tracks no page for revisits)
    freshness: Freshness | None = None
    #: the job's counters, summed over its shards as :meth:`JobFrontier.counters` sums them
    counters: dict[str, int] = field(default_factory=dict)
    #: node id -> the summary its closed run left (None: not read, see :func:`snapshot`)
    runs: dict[str, dict[str, Any]] | None = None

    @property
    def live_nodes(self) -> list[str]:
        return [n for n, info in self.nodes.items() if info["alive"]]

    @property
    def phases(self) -> list[str]:
        """What live nodes say of a long phase they run (a re-crawl round, a campaign:
        their latest progress line), the most recently published first, each once."""
        said = [
            (float(info.get("updated") or 0), info["phase"])
            for info in self.nodes.values()
            if info["alive"] and isinstance(info.get("phase"), str) and info["phase"]
        ]
        return list(dict.fromkeys(phase for _, phase in sorted(said, reverse=True)))

    @property
    def pages_per_second(self) -> float | None:
        """Summed pages/min of the live nodes that publish it, per second."""
        rates = [
            float(info["pages_per_min"])
            for info in self.nodes.values()
            if info["alive"] and isinstance(info.get("pages_per_min"), (int, float))
        ]
        return sum(rates) / 60.0 if rates else None

    @property
    def paused(self) -> bool:
        return self.job_control.get("state") in ("paused", "stopped")

    @property
    def eta_seconds(self) -> float | None:
        """Work left over the cluster's page rate, and never less than the slowest
        site's queue takes at its rate limit; ``None`` while the job is paused or
        stopped, when no rate is known and no limit bounds it, and for a continuous
        job (it never ends)."""
        if self.freshness is not None:
            return None
        left = self.queued + self.leased
        if left == 0:
            return 0.0
        if self.paused:
            return None
        rate = self.pages_per_second
        by_rate = left / rate if rate else None
        if by_rate is None:
            return self.polite_seconds or None
        return max(by_rate, self.polite_seconds)

    @property
    def eta_limited_by(self) -> str:
        """What the ETA follows: "done", "paused", "rate limit of SITE", "page rate",
        "continuous" (a job that revisits its pages never ends) or "unknown"."""
        if self.freshness is not None:
            return "continuous"
        eta = self.eta_seconds
        if eta == 0.0:
            return "done"
        if self.paused:
            return str(self.job_control["state"])
        if eta is None:
            return "unknown"
        if self.polite_site and eta == self.polite_seconds:
            return f"rate limit of {self.polite_site}"
        return "page rate"

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "now_ms": self.now_ms,
            "queued": self.queued,
            "leased": self.leased,
            "overdue_leases": self.overdue_leases,
            "waiting": self.waiting,
            "waiting_due": self.waiting_due,
            "sites": self.sites,
            "shards": self.shards,
            "top_sites": [{"site": s, "queued": n} for s, n in self.top_sites],
            "sites_scanned": self.sites_scanned,
            "malformed_set_aside": self.malformed,
            "live_nodes": len(self.live_nodes),
            "dead_nodes": len(self.nodes) - len(self.live_nodes),
            "nodes": self.nodes,
            "pages_per_second": self.pages_per_second,
            "eta_seconds": self.eta_seconds,
            "eta_limited_by": self.eta_limited_by,
            "job_control": self.job_control,
            "backoff_ms": self.backoff,
            "robots_delay_ms": self.robots,
            "site_limits_per_s": self.site_limits,
            "freshness": None if self.freshness is None else self.freshness.as_dict(),
        }


def configured_limits(settings: BaseSettings) -> RateLimits:
    """The rate limits of ``CRAWLFLEET_RATE_LIMITS`` (with the margin nodes apply), over
    which a job's run-time limits go; ConfigError naming what is wrong."""
    return RateLimits.parse(
        get_dict(settings, "CRAWLFLEET_RATE_LIMITS"),
        source="CRAWLFLEET_RATE_LIMITS",
        margin=rate_limit_margin(settings),
    )


async def redis_now_ms(client: Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def job_names(client: Redis, prefix: str, job: str | None) -> list[str]:
    """[job] when one is named (UnknownJob if this Redis has never seen it), else the
    known jobs (sorted, at most JOBS_MAX)."""
    if job:
        await require_job(client, prefix, job)
        return [job]
    return (await list_jobs(client, prefix))[:JOBS_MAX]


async def snapshot(
    client: Redis, keys: JobKeys, limits: RateLimits | None = None, *, runs: bool = False
) -> JobSnapshot:
    """Read one job's state: a few round trips, nothing written. *limits*: the
    configured rate limits (the job's run-time ones are read and applied over them);
    *runs*: read the summaries its closed node runs left too."""
    return (await snapshots(client, [keys], limits, runs=runs))[0]


async def snapshots(
    client: Redis,
    jobs: Sequence[JobKeys],
    limits: RateLimits | None = None,
    *,
    runs: bool = False,
) -> list[JobSnapshot]:
    """Read the state of each of *jobs* (as :func:`snapshot`), in as many round trips
    for many jobs as for one: each step of every job's read goes in one pipeline, two
    steps (the first beside Redis's clock), three when a job is sharded. A continuous
    job's freshness is read after, every such job's at once (its own round trips)."""
    read = await _in_lockstep(client, [_read(keys, limits, runs=runs) for keys in jobs])
    tracking = [(i, snap) for i, (snap, tracked) in enumerate(read) if tracked > 0]
    found = await asyncio.gather(
        *(job_freshness(JobFrontier(client, jobs[i])) for i, _ in tracking)
    )
    out = [snap for snap, _ in read]
    for (i, snap), fresh in zip(tracking, found, strict=True):
        fresh.add_nodes(snap.nodes)
        out[i] = dataclasses.replace(snap, freshness=fresh)
    return out


#: A step of a job's read: queues its commands on the step's pipeline (shared by every
#: job read at once).
_Step = Callable[[Pipeline], object]
#: What a step's commands answered (its own replies only), and Redis's clock (ms)
_Replies = tuple[list[Any], int]
#: One job's read: its steps, then its snapshot (freshness not read yet) and how many
#: pages it tracks for revisits
_Read = Generator[_Step, _Replies, tuple[JobSnapshot, int]]


async def _in_lockstep(client: Redis, reads: Sequence[_Read]) -> list[tuple[JobSnapshot, int]]:
    """Run *reads* side by side, one pipeline a step for all of them; Redis's clock is
    read beside the first (apart: a cluster's pipelines take keyed commands only)."""
    done: dict[int, tuple[JobSnapshot, int]] = {}
    steps = {i: next(r) for i, r in enumerate(reads)}
    now: int | None = None
    while steps:
        pipe = client.pipeline(transaction=False)
        spans: dict[int, tuple[int, int]] = {}
        for i, step in steps.items():
            start = len(pipe)
            step(pipe)
            spans[i] = (start, len(pipe))
        if now is None:
            now, replies = await asyncio.gather(redis_now_ms(client), pipe.execute())
        else:
            replies = await pipe.execute() if len(pipe) else []
        after: dict[int, _Step] = {}
        for i, (start, end) in spans.items():
            try:
                after[i] = reads[i].send((replies[start:end], now))
            except StopIteration as stop:
                done[i] = stop.value
        steps = after
    return [done[i] for i in range(len(reads))]


def _read(keys: JobKeys, limits: RateLimits | None, *, runs: bool) -> _Read:
    """One job's read, in steps (see :func:`_in_lockstep`): its own keys; then what
    needs Redis's clock or its shard count (its other shards); then its sites' queues
    (a step of their own only when it is sharded: its sites are known then)."""

    def first(pipe: Pipeline) -> None:
        pipe.hgetall(keys.counters)
        pipe.zcard(keys.leases)
        pipe.zrange(keys.leases, 0, 0, withscores=True)
        pipe.zcard(keys.waiting)
        pipe.zcard(keys.sites)
        pipe.zrange(keys.sites, 0, SITES_SCANNED - 1)
        pipe.llen(keys.bad)
        pipe.zrange(keys.nodes, 0, -1, withscores=True)
        pipe.hgetall(keys.nodeinfo)
        pipe.hmget(keys.control, f"{ALL_NODES}:state", f"{ALL_NODES}:concurrency")
        pipe.hgetall(keys.limits)
        pipe.hgetall(keys.fleet.limits)
        pipe.get(keys.shards_key)
        if runs:
            pipe.hgetall(keys.summaries)

    replies, now = yield first
    (
        home,
        leased,
        oldest,
        waiting,
        nsites,
        sites,
        bad,
        nodes,
        info,
        control,
        run_time_limits,
        fleet_limits,
        shards,
        *summaries,
    ) = replies
    count = min(max(1, counter_value(shards)), MAX_SHARDS)
    each = [counter_values(home)]
    queued, tracked = each[0].get("queued", 0), each[0].get("tracked", 0)
    leased, waiting = int(leased), int(waiting)
    parts = [keys.in_shard(shard, count) for shard in range(1, count)]
    site_names = [text(s) for s in sites]
    # the fleet's throttle hash holds every site of every job: this job's sites only
    # (those with queued requests, as scanned), read with their queues' sizes
    fields: list[str] = []

    def sizes(pipe: Pipeline) -> None:
        fields[:] = [f"{kind}:{site}" for site in site_names for kind in ("b", "r")]
        if not site_names:
            return
        for site in site_names:
            part = keys.in_shard(shard_of(site, count), count)
            pipe.zcard(part.queue(site))
            pipe.llen(part.fifo(site))
            pipe.llen(part.revisits(site))
        pipe.hmget(keys.fleet.throttle, fields)

    def second(pipe: Pipeline) -> None:
        if leased:
            pipe.zcount(keys.leases, "-inf", f"({now}")
        if waiting:
            pipe.zcount(keys.waiting, "-inf", f"({now}")
        for part in parts:  # the other shards' queues and leases (the registry is shard 0's)
            pipe.hgetall(part.counters)
            pipe.zcard(part.leases)
            pipe.zrange(part.leases, 0, 0, withscores=True)
            pipe.zcount(part.leases, "-inf", f"({now}")
            pipe.zcard(part.waiting)
            pipe.zcount(part.waiting, "-inf", f"({now}")
            pipe.zcard(part.sites)
            pipe.zrange(part.sites, 0, SITES_SCANNED - 1)
            pipe.llen(part.bad)
        if not parts:  # its sites are known already
            sizes(pipe)

    found, _ = yield second
    overdue = int(found.pop(0)) if leased else 0
    due = int(found.pop(0)) if waiting else 0
    if parts:
        scanned = [site_names]
        for i in range(len(parts)):
            counted, n, first_lease, late, w, came, ns, names, b = found[i * 9 : i * 9 + 9]
            each.append(counter_values(counted))
            queued += max(0, each[-1].get("queued", 0))
            tracked += max(0, each[-1].get("tracked", 0))
            leased += int(n)
            overdue += int(late)
            waiting, due = waiting + int(w), due + int(came)
            oldest = sorted([*oldest, *first_lease], key=lambda pair: pair[1])[:1]
            nsites, bad = int(nsites) + int(ns), int(bad) + int(b)
            scanned.append([text(s) for s in names])
        site_names = interleave(scanned, SITES_SCANNED)
        found, _ = yield sizes
    counts: list[int] = []
    values: list[Any] = []
    if site_names:
        *lengths, values = found
        counts = [sum(int(n) for n in lengths[i : i + 3]) for i in range(0, len(lengths), 3)]
    top = sorted(zip(site_names, counts, strict=True), key=lambda p: (-p[1], p[0]))[:TOP_SITES]
    node_view = _node_view(nodes, info, now)
    job_control: dict[str, str] = {}
    wanted = desired({f"{ALL_NODES}:state": control[0], f"{ALL_NODES}:concurrency": control[1]})
    if wanted.state_seq:
        job_control["state"] = wanted.state
    if wanted.concurrency:
        job_control["concurrency"] = str(wanted.concurrency)
    throttled = parse_throttle({f: v for f, v in zip(fields, values, strict=True) if v is not None})
    merged = Budgets(
        (limits or RateLimits({})).merged(_valid_limits(fleet_limits)),
        _valid_limits(run_time_limits),
        job=keys.job,
    )
    polite_seconds, polite_site = _polite_bound(top, merged, throttled)
    site_limits = {}
    for site, _ in top:
        limit = merged.limit(site)
        if limit is not None:
            site_limits[site] = round(limit.per_second, 3)
    snap = JobSnapshot(
        job=keys.job,
        now_ms=now,
        queued=queued,
        leased=leased + waiting,
        overdue_leases=overdue,
        oldest_deadline_ms=int(oldest[0][1]) if oldest else None,
        sites=int(nsites),
        top_sites=top,
        sites_scanned=len(site_names),
        malformed=int(bad),
        nodes=node_view,
        job_control=job_control,
        backoff=throttled["backoff"],
        robots={site: ms for site, ms in throttled["robots"].items() if ms > 0},
        polite_seconds=polite_seconds,
        polite_site=polite_site,
        site_limits=site_limits,
        shards=count,
        waiting=waiting,
        waiting_due=due,
        counters=sum_counters(each),
        runs=json_objects(summaries[0]) if runs else None,
    )
    # a continuous job's freshness: read only when it tracks pages (a few more round
    # trips, see snapshots)
    return snap, tracked


async def job_nodes(client: Redis, jobs: Sequence[JobKeys]) -> list[dict[str, dict[str, Any]]]:
    """The nodes of each of *jobs* as its snapshot has them (:attr:`JobSnapshot.nodes`),
    read alone: one round trip beside Redis's clock, whatever the number of jobs."""
    if not jobs:
        return []
    pipe = client.pipeline(transaction=False)
    for keys in jobs:
        pipe.zrange(keys.nodes, 0, -1, withscores=True)
        pipe.hgetall(keys.nodeinfo)
    now, found = await asyncio.gather(redis_now_ms(client), pipe.execute())
    return [_node_view(found[i], found[i + 1], now) for i in range(0, len(found), 2)]


def _node_view(
    nodes: list[tuple[bytes, float]], info: dict[Any, Any], now: int
) -> dict[str, dict[str, Any]]:
    """Node id -> {"alive", "expires_in_s", **its published status}, of a job's
    registry (ZRANGE WITHSCORES) and ``nodeinfo`` hash (HGETALL) at *now* (ms)."""
    statuses = node_statuses(info)
    out: dict[str, dict[str, Any]] = {}
    for raw, expires in nodes:
        node = text(raw)
        view: dict[str, Any] = {
            "alive": int(expires) >= now,
            "expires_in_s": round((int(expires) - now) / 1000.0, 1),
        }
        published = statuses.get(node, {})
        view.update({k: v for k, v in published.items() if k not in view})
        out[node] = view
    return out


def _valid_limits(raw: dict[Any, Any]) -> RateLimits:
    """The run-time limits of a hash as read, without the bad ones (nodes ignore them
    too, saying so)."""
    return RateLimits.lenient({text(k): text(v) for k, v in raw.items()})


def _polite_bound(
    top: list[tuple[str, int]],
    merged: Budgets,
    throttled: dict[str, dict[str, int]],
) -> tuple[float, str | None]:
    """The longest any of the *top* site queues takes at its interval (its limit,
    robots.txt delay or back-off, whichever is widest), and that site."""
    worst, worst_site = 0.0, None
    for site, queued in top:
        interval_s = max(
            merged.interval_us(site) / 1_000_000,
            throttled["robots"].get(site, 0) / 1000,
            throttled["backoff"].get(site, 0) / 1000,
        )
        if queued * interval_s > worst:
            worst, worst_site = queued * interval_s, site
    return worst, worst_site
