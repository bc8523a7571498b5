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
from typing import Any

from redis.asyncio import Redis
from rich.console import Console, Group
from rich.table import Table

from crawlfleet.cli.options import (
    add_redis_options,
    add_settings_option,
    cli_client,
    command_settings,
    resolved_url,
)
from crawlfleet.cli.watch import watch
from crawlfleet.exceptions import ConfigError
from crawlfleet.fleet.snapshot import JobSnapshot, configured_limits, job_names, snapshot
from crawlfleet.redis.keys import JobKeys
from crawlfleet.settings.config import RedisConfig, validate_job_name

__all__ = ["render"]

NAME = "status"
HELP = "nodes (alive/dead, live figures), queues, leases and ETA of jobs (read-only)"

MIN_INTERVAL, MAX_INTERVAL = 0.5, 60.0


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
    limits = configured_limits(settings)
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
        summary.add_row("sites", str(s.sites) + (f" in {s.shards} shards" if s.shards > 1 else ""))
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
    """running / paused / draining / stopped / waiting for the item store for a live
    node, "dead Ns" otherwise."""
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
