"""``crawlfleet status [JOB] [--json] [--watch]``: the nodes and the work of jobs.

Read-only. For each job (one, or every job in ``<prefix>:jobs``): nodes alive or dead
(their registry deadline against Redis's clock) with the figures each publishes in the
job's ``nodeinfo`` hash, queued and leased counts, the longest site queues, entries set
aside as malformed, and an ETA (work left / summed pages per second of live nodes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from rich.console import Console, Group
from rich.table import Table

from crawlfleet.cli.options import (
    add_redis_options,
    add_settings_option,
    cli_client,
    command_settings,
    require_job,
    resolved_url,
)
from crawlfleet.cli.watch import watch
from crawlfleet.exceptions import ConfigError
from crawlfleet.frontier.client import counter_value, parse_throttle
from crawlfleet.frontier.control import ALL_NODES, desired
from crawlfleet.frontier.limits import RateLimits
from crawlfleet.redis.keys import JobKeys, jobs_key
from crawlfleet.settings.access import get_dict
from crawlfleet.settings.config import RedisConfig, rate_limit_margin, validate_job_name

__all__ = [
    "SITES_SCANNED",
    "TOP_SITES",
    "JobSnapshot",
    "job_names",
    "redis_now_ms",
    "snapshot",
]

NAME = "status"
HELP = "nodes (alive/dead, live figures), queues, leases and ETA of jobs (read-only)"

#: Site queues shown, longest first.
TOP_SITES = 20
#: Site queues measured at most per job (in serve order) to find the longest ones.
SITES_SCANNED = 1000
#: Jobs shown at most when no job is named.
JOBS_MAX = 100
MIN_INTERVAL, MAX_INTERVAL = 0.5, 60.0


@dataclass(frozen=True)
class JobSnapshot:
    """One job's state at one moment (``now_ms``: Redis's clock)."""

    job: str
    now_ms: int
    queued: int
    leased: int
    overdue_leases: int  #: leases whose deadline has passed
    oldest_deadline_ms: int | None  #: the earliest lease deadline
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

    @property
    def live_nodes(self) -> list[str]:
        return [n for n, info in self.nodes.items() if info["alive"]]

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
        stopped, or when no rate is known and no limit bounds it."""
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
        """What the ETA follows: "done", "paused", "rate limit of SITE", "page rate"
        or "unknown"."""
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
            "sites": self.sites,
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
        }


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def redis_now_ms(client: Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def job_names(client: Redis, prefix: str, job: str | None) -> list[str]:
    """[job] when one is named (UnknownJob if this Redis has never seen it), else the
    known jobs (sorted, at most JOBS_MAX)."""
    if job:
        await require_job(client, prefix, job)
        return [job]
    return sorted(_text(j) for j in await client.smembers(jobs_key(prefix)))[:JOBS_MAX]


async def snapshot(client: Redis, keys: JobKeys, limits: RateLimits | None = None) -> JobSnapshot:
    """Read one job's state: a few round trips, nothing written. *limits*: the
    configured rate limits (the job's run-time ones are read and applied over them)."""
    pipe = client.pipeline(transaction=False)
    pipe.time()
    pipe.hget(keys.counters, "queued")
    pipe.zcard(keys.leases)
    pipe.zrange(keys.leases, 0, 0, withscores=True)
    pipe.zcard(keys.sites)
    pipe.zrange(keys.sites, 0, SITES_SCANNED - 1)
    pipe.llen(keys.bad)
    pipe.zrange(keys.nodes, 0, -1, withscores=True)
    pipe.hgetall(keys.nodeinfo)
    pipe.hmget(keys.control, f"{ALL_NODES}:state", f"{ALL_NODES}:concurrency")
    pipe.hgetall(keys.throttle)
    pipe.hgetall(keys.limits)
    (
        t,
        queued,
        leased,
        oldest,
        nsites,
        sites,
        bad,
        nodes,
        info,
        control,
        throttle,
        run_time_limits,
    ) = await pipe.execute()
    now = int(t[0]) * 1000 + int(t[1]) // 1000
    overdue = int(await client.zcount(keys.leases, "-inf", f"({now}")) if leased else 0
    site_names = [_text(s) for s in sites]
    counts: list[int] = []
    if site_names:
        sizes = client.pipeline(transaction=False)
        for site in site_names:
            sizes.zcard(keys.queue(site))
        counts = [int(c) for c in await sizes.execute()]
    top = sorted(zip(site_names, counts, strict=True), key=lambda p: (-p[1], p[0]))[:TOP_SITES]
    statuses = {_text(k): v for k, v in info.items()}
    node_view: dict[str, dict[str, Any]] = {}
    for raw, expires in nodes:
        node = _text(raw)
        view: dict[str, Any] = {
            "alive": int(expires) >= now,
            "expires_in_s": round((int(expires) - now) / 1000.0, 1),
        }
        published = statuses.get(node)
        if published is not None:
            try:
                figures = json.loads(published)
            except ValueError:
                figures = {"status_error": "not JSON"}
            if isinstance(figures, dict):
                view.update({k: v for k, v in figures.items() if k not in view})
        node_view[node] = view
    job_control: dict[str, str] = {}
    wanted = desired({f"{ALL_NODES}:state": control[0], f"{ALL_NODES}:concurrency": control[1]})
    if wanted.state_seq:
        job_control["state"] = wanted.state
    if wanted.concurrency:
        job_control["concurrency"] = str(wanted.concurrency)
    throttled = parse_throttle(throttle)
    polite_seconds, polite_site = _polite_bound(
        top, limits or RateLimits({}), run_time_limits, throttled
    )
    return JobSnapshot(
        job=keys.job,
        now_ms=now,
        queued=counter_value(queued),
        leased=int(leased),
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
    )


def _polite_bound(
    top: list[tuple[str, int]],
    limits: RateLimits,
    run_time: dict[Any, Any],
    throttled: dict[str, dict[str, int]],
) -> tuple[float, str | None]:
    """The longest any of the *top* site queues takes at its interval (its limit,
    robots.txt delay or back-off, whichever is widest), and that site."""
    valid: dict[str, str] = {}
    for pattern, spec in run_time.items():
        try:
            RateLimits.parse({_text(pattern): _text(spec)}, source="limits")
            valid[_text(pattern)] = _text(spec)
        except ConfigError:
            continue  # nodes ignore it too, saying so
    merged = limits.merged(RateLimits.parse(valid, source="limits"))
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", nargs="?", help="the job (default: every job in this Redis)")
    parser.add_argument(
        "--json", action="store_true", help="print one JSON document (--watch: one a line)"
    )
    parser.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    parser.add_argument(
        "--interval",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help=f"--watch refresh interval ({MIN_INTERVAL:g} to {MAX_INTERVAL:g}; default 2)",
    )
    parser.add_argument(
        "--count",
        type=int,
        default=0,
        metavar="N",
        help="--watch: stop after N refreshes (default: until Ctrl-C)",
    )
    add_redis_options(parser)
    add_settings_option(parser)


def run(args: argparse.Namespace) -> int:
    settings = command_settings(args)
    config = RedisConfig.from_settings(settings)
    margin = rate_limit_margin(settings)
    limits = RateLimits.parse(
        get_dict(settings, "CRAWLFLEET_RATE_LIMITS"), source="CRAWLFLEET_RATE_LIMITS", margin=margin
    )
    if args.job:
        validate_job_name(args.job)
    if not MIN_INTERVAL <= args.interval <= MAX_INTERVAL:
        raise ConfigError(
            f"--interval must be between {MIN_INTERVAL:g} and {MAX_INTERVAL:g} seconds, "
            f"got {args.interval:g}"
        )
    url = resolved_url(args, config)
    console = Console()

    async def collect(client: Redis) -> list[JobSnapshot]:
        names = await job_names(client, config.key_prefix, args.job)
        return [await snapshot(client, JobKeys.of(config.key_prefix, n), limits) for n in names]

    async def main() -> int:
        client = cli_client(url)
        try:
            if not args.watch:
                snaps = await collect(client)
                if args.json:
                    print(json.dumps(_document(snaps), indent=2, sort_keys=True, default=str))
                else:
                    console.print(render(snaps, console.width))
                return 0
            return await watch(
                console,
                interval=args.interval,
                count=args.count,
                as_json=args.json,
                collect=lambda: collect(client),
                render=lambda snaps: render(snaps, console.width),
                document=_document,
            )
        finally:
            await client.aclose()

    try:
        return asyncio.run(main())  # Redis errors: one line from crawlfleet.cli.main
    except KeyboardInterrupt:
        return 0


def _document(snaps: list[JobSnapshot]) -> dict[str, Any]:
    return {"jobs": {s.job: s.to_json() for s in snaps}}


# -- rendering ----------------------------------------------------------------------
#: Below this terminal width the nodes table keeps its essential columns only.
WIDE_COLUMNS = 120


def render(snaps: list[JobSnapshot], width: int = WIDE_COLUMNS) -> Group:
    """Rich tables: per job, a summary, its nodes and its longest site queues; narrower
    than WIDE_COLUMNS (an 80-column terminal), the nodes table has fewer columns."""
    if not snaps:
        return Group("no jobs")
    parts: list[Any] = []
    for s in snaps:
        summary = Table(title=f"job {s.job}", show_header=False)
        summary.add_column("what")
        summary.add_column("value", justify="right")
        summary.add_row("queued", str(s.queued))
        summary.add_row("leased", f"{s.leased} ({s.overdue_leases} overdue)")
        summary.add_row("sites", str(s.sites))
        summary.add_row("malformed set aside", str(s.malformed))
        summary.add_row(
            "nodes alive / dead", f"{len(s.live_nodes)} / {len(s.nodes) - len(s.live_nodes)}"
        )
        rate = s.pages_per_second
        summary.add_row("pages/s (live nodes)", "-" if rate is None else f"{rate:.2f}")
        summary.add_row("ETA", _eta(s))
        if s.job_control:
            summary.add_row(
                "commands for every node",
                ", ".join(f"{k} {v}" for k, v in sorted(s.job_control.items())),
            )
        if s.backoff:
            summary.add_row("sites backed off", _site_list(s.backoff))
        if s.robots:
            summary.add_row("robots.txt Crawl-delays", _site_list(s.robots))
        parts.append(summary)
        if s.nodes:
            parts.append(_nodes_table(s, wide=width >= WIDE_COLUMNS))
        if s.top_sites:
            sites = Table(title=f"longest site queues ({len(s.top_sites)} of {s.sites})")
            sites.add_column("site")
            sites.add_column("queued", justify="right")
            for site, n in s.top_sites:
                sites.add_row(site, str(n))
            parts.append(sites)
    return Group(*parts)


#: The nodes table's columns kept on a narrow terminal.
NARROW_COLUMNS = ("node", "state", "pages/min", "pages", "items", "errors", "in flight")


def _nodes_table(s: JobSnapshot, *, wide: bool = True) -> Table:
    table = Table(title=f"nodes of {s.job}")
    columns = (
        "node",
        "state",
        "pages/min",
        "items/min",
        "pages",
        "items",
        "errors",
        "latency ms",
        "in flight",
        "CPU %",
        "RSS MB",
        "loop lag ms",
    )
    keep = [c in NARROW_COLUMNS or wide for c in columns]
    widest = max(len(n) for n in s.nodes)
    table.add_column(columns[0], no_wrap=True, min_width=widest)  # ids stay whole
    for name, kept in zip(columns[1:], keep[1:], strict=True):
        if kept:
            table.add_column(name, justify="left" if name == "state" else "right")
    for node, info in sorted(s.nodes.items(), key=lambda p: (not p[1]["alive"], p[0])):
        errors = info.get("errors")
        in_flight = info.get("in_flight")
        rss = info.get("rss_bytes")
        cells = (
            node,
            str(info.get("state", "alive"))
            if info["alive"]
            else f"dead {-info['expires_in_s']:.0f}s",
            _num(info.get("pages_per_min")),
            _num(info.get("items_per_min")),
            _num(info.get("pages")),
            _num(info.get("items")),
            "/".join(str(v) for v in errors.values()) if isinstance(errors, dict) else "-",
            _num(info.get("latency_ms")),
            "-" if in_flight is None else f"{in_flight}/{info.get('concurrency', '?')}",
            _num(info.get("cpu_percent")),
            "-" if not isinstance(rss, int) else f"{rss / 2**20:.0f}",
            _num(info.get("loop_lag_max_ms")),
        )
        table.add_row(*(c for c, k in zip(cells, keep, strict=True) if k))
    return table


def _site_list(intervals: dict[str, int], most: int = 5) -> str:
    """ "3: a.com 2.0s, b.org 1.0s, ..." (the widest intervals first)."""
    widest = sorted(intervals.items(), key=lambda p: (-p[1], p[0]))[:most]
    listed = ", ".join(f"{site} {ms / 1000:.1f}s" for site, ms in widest)
    return f"{len(intervals)}: {listed}" + (", ..." if len(intervals) > most else "")


def _node_state(info: dict[str, Any]) -> str:
    """running / paused / draining / stopped for a live node, "dead Ns" otherwise."""
    if not info["alive"]:
        return f"dead {-info['expires_in_s']:.0f}s"
    return str(info.get("state", "alive"))


def _num(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.1f}"


def _eta(s: JobSnapshot) -> str:
    eta, why = s.eta_seconds, s.eta_limited_by
    if why in ("paused", "stopped"):
        return f"none while {why}"
    if eta is None:
        return "unknown (no page rate)"
    return _duration(eta) + (f" ({why})" if why.startswith("rate limit") else "")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown (no page rate)"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
