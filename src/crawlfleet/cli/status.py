"""``crawlfleet status [JOB] [--json] [--watch]``: the nodes and the work of jobs.

Read-only. For each job (one, or every job in ``<prefix>:jobs``): nodes alive or dead
(their registry deadline against Redis's clock) with the figures each publishes in the
job's ``nodeinfo`` hash, queued and leased counts, the longest site queues, entries set
aside as malformed, an ETA (work left / summed pages per second of live nodes), and
the long phase its nodes are in (a re-crawl round, a campaign: their latest progress
line).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from redis.asyncio import Redis
from rich.console import Console, Group, JustifyMethod
from rich.table import Table

from crawlfleet.cli.arguments import Option, add_options
from crawlfleet.cli.options import add_fleet_options, command_settings, run_on_redis
from crawlfleet.cli.watch import watch
from crawlfleet.exceptions import ConfigError
from crawlfleet.fleet.freshness import Freshness
from crawlfleet.fleet.snapshot import JobSnapshot, configured_limits, job_names, snapshots
from crawlfleet.frontier.config import validate_job_name
from crawlfleet.redis.keys import JobKeys

__all__ = ["render"]

NAME = "status"
HELP = "nodes (alive/dead, live figures), queues, leases and ETA of jobs (read-only)"

MIN_INTERVAL, MAX_INTERVAL = 0.5, 60.0
#: Different phases shown at most (nodes of one job usually say the same).
PHASES_SHOWN = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", nargs="?", help="the job (default: every job in this Redis)")
    parser.add_argument(
        "--json", action="store_true", help="print one JSON document (--watch: one a line)"
    )
    parser.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    add_options(
        parser,
        Option(
            "--interval",
            float,
            2.0,
            f"--watch refresh interval ({MIN_INTERVAL:g} to {MAX_INTERVAL:g}; default 2)",
            metavar="SECONDS",
        ),
        Option(
            "--count",
            int,
            0,
            "--watch: stop after N refreshes (default: until Ctrl-C)",
            metavar="N",
        ),
    )
    add_fleet_options(parser)


def run(args: argparse.Namespace) -> int:
    settings = command_settings(args)
    limits = configured_limits(settings)
    if args.job:
        validate_job_name(args.job)
    if not MIN_INTERVAL <= args.interval <= MAX_INTERVAL:
        raise ConfigError(
            f"--interval must be between {MIN_INTERVAL:g} and {MAX_INTERVAL:g} seconds, "
            f"got {args.interval:g}"
        )
    console = Console()

    async def collect(client: Redis, prefix: str) -> list[JobSnapshot]:
        names = await job_names(client, prefix, args.job)
        return await snapshots(client, [JobKeys.of(prefix, n) for n in names], limits)

    async def main(client: Redis, prefix: str) -> int:
        if not args.watch:
            snaps = await collect(client, prefix)
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
            collect=lambda: collect(client, prefix),
            render=lambda snaps: render(snaps, console.width),
            document=_document,
        )

    try:
        # Redis errors: one line from crawlfleet.cli.main
        return run_on_redis(args, main, settings=settings)
    except KeyboardInterrupt:
        return 0


def _document(snaps: list[JobSnapshot]) -> dict[str, Any]:
    return {"jobs": {s.job: s.to_json() for s in snaps}}


# -- rendering ----------------------------------------------------------------------
#: The nodes table's columns as shown, left to right: (header, justify). A header of two
#: lines says what a cell's parts are.
COLUMNS: tuple[tuple[str, JustifyMethod], ...] = (
    ("node", "left"),
    ("state", "left"),
    ("pages/min", "right"),
    ("items/min", "right"),
    ("pages", "right"),
    ("items", "right"),
    ("errors\nspider/dl/log", "right"),
    ("latency ms", "right"),
    ("in flight", "right"),
    ("CPU %", "right"),
    ("RSS MB", "right"),
    ("loop lag ms", "right"),
)
#: The columns dropped first when the table is wider than the terminal: the least
#: telling first (the node, its state and its pages are never dropped).
DROPPED_FIRST = (
    "loop lag ms",
    "RSS MB",
    "CPU %",
    "latency ms",
    "items/min",
    "in flight",
    "items",
    "errors\nspider/dl/log",
    "pages/min",
)


def render(snaps: list[JobSnapshot], width: int = 120) -> Group:
    """Rich tables: per job, a summary, its nodes and its longest site queues, each no
    wider than *width* (the nodes table drops its least telling columns to fit; headers
    are never cut)."""
    if not snaps:
        return Group("no jobs")
    parts: list[Any] = []
    for s in snaps:
        summary = Table(title=f"job {s.job}", show_header=False)
        summary.add_column("what", no_wrap=True)
        summary.add_column("value", justify="right")
        summary.add_row("queued", str(s.queued))
        summary.add_row("leased", f"{s.leased - s.waiting} ({s.overdue_leases} overdue)")
        if s.waiting:
            summary.add_row("waiting for their time", f"{s.waiting} ({s.waiting_due} due)")
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
        for phase in s.phases[:PHASES_SHOWN]:
            summary.add_row("phase", phase)
        if s.backoff:
            summary.add_row("sites backed off", _site_list(s.backoff))
        if s.robots:
            summary.add_row("robots.txt Crawl-delays", _site_list(s.robots))
        if s.freshness is not None:
            _freshness_rows(summary, s.freshness)
        parts.append(summary)
        if s.nodes:
            parts.append(_nodes_table(s, width))
        if s.top_sites:
            sites = Table(title=f"longest site queues ({len(s.top_sites)} of {s.sites})")
            sites.add_column("site")
            sites.add_column("queued", justify="right", no_wrap=True)
            for site, n in s.top_sites:
                sites.add_row(site, str(n))
            parts.append(sites)
    return Group(*parts)


def _freshness_rows(summary: Table, f: Freshness) -> None:
    """A continuous job's freshness (crawlfleet.fleet.freshness) in its summary."""
    summary.add_row("pages tracked for revisits", str(f.tracked))
    summary.add_row("revisits made / changes (new pages too)", f"{f.revisits} / {f.changes}")
    summary.add_row(
        "changes in the last hour", f"{f.changes_last_hour}{'+' if f.changes_hour_capped else ''}"
    )
    if f.sampled:
        summary.add_row(
            f"age of the copy (of {f.sampled} sampled)",
            f"median {_duration(f.age_p50_s or 0)}, 95% {_duration(f.age_p95_s or 0)}",
        )
        summary.add_row("sampled pages past due", str(f.overdue))
    worst = ", ".join(f"{site} {n}" for site, n in list(f.behind_sites.items())[:3])
    summary.add_row(
        "revisits behind (due / queued)",
        f"{f.behind} ({f.revisits_due} / {f.revisits_queued})" + (f": {worst}" if worst else ""),
    )
    if f.not_modified_share is not None:
        summary.add_row(
            "304 share / late after due (live nodes)",
            f"{f.not_modified_share:.0%} / {f.late_mean_s:.1f} s",
        )


def _nodes_table(s: JobSnapshot, width: int) -> Table:
    """The nodes of *s*, with as many columns as fit in *width*."""
    rows = [_node_cells(node, info) for node, info in _nodes_in_order(s)]
    shown = [header for header, _ in COLUMNS]
    measure = Console(width=10_000)
    for dropped in (None, *DROPPED_FIRST):
        if dropped is not None:
            shown.remove(dropped)
        table = Table(title=f"nodes of {s.job}")
        for header, justify in COLUMNS:
            if header in shown:
                table.add_column(header, justify=justify, no_wrap=True)
        for cells in rows:
            table.add_row(*(c for (h, _), c in zip(COLUMNS, cells, strict=True) if h in shown))
        if measure.measure(table).maximum <= width:
            break
    return table


def _nodes_in_order(s: JobSnapshot) -> list[tuple[str, dict[str, Any]]]:
    """Live nodes first, then by id."""
    return sorted(s.nodes.items(), key=lambda p: (not p[1]["alive"], p[0]))


def _node_cells(node: str, info: dict[str, Any]) -> tuple[str, ...]:
    """One node's cells, in COLUMNS order."""
    errors = info.get("errors")
    in_flight = info.get("in_flight")
    rss = info.get("rss_bytes")
    return (
        node,
        _node_state(info),
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
    if why == "done":  # before the first seed as after the end: no ETA to give
        return "- (nothing queued or leased)"
    if why in ("paused", "stopped"):
        return f"none while {why}"
    if why == "continuous":
        return "none (continuous)"
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
