"""``crawlfleet job status|reset|list``: look at and administer jobs."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console
from rich.table import Table

from crawlfleet.cli.options import add_fleet_options, run_on_frontier, run_on_redis
from crawlfleet.fleet.jobs import ResetResult, job_figures, list_jobs, reset_job
from crawlfleet.frontier.sharded import JobFrontier

NAME = "job"
HELP = "show, list or reset jobs (reset deletes a job's shared state: explicit only)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    status = sub.add_parser("status", help="queues, leases, nodes and counters of a job")
    status.add_argument("job")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    reset = sub.add_parser(
        "reset", help="delete every key of a job (queues, seen-filter, limits...)"
    )
    reset.add_argument("job")
    reset.add_argument(
        "--force", action="store_true", help="reset even while nodes are alive on the job"
    )
    reset.add_argument(
        "--keep-limits",
        action="store_true",
        help="keep the job's run-time rate limits (crawlfleet limits set)",
    )
    sub.add_parser("list", help="jobs known to this Redis")
    for p in (status, reset, sub.choices["list"]):
        add_fleet_options(p)


def run(args: argparse.Namespace) -> int:
    console = Console()
    if args.action == "list":
        return _list(args, console)
    if args.action == "status":
        status = run_on_frontier(args, args.job, job_figures)
        if args.json:
            print(json.dumps(status, indent=2, sort_keys=True))
            return 0
        console.print(_status_table(args.job, status))
        return 0

    async def reset(frontier: JobFrontier) -> ResetResult:
        return await reset_job(
            frontier, force=args.force, keep_limits=args.keep_limits, force_hint="--force"
        )

    result = run_on_frontier(args, args.job, reset)
    deleted, unstored = result.deleted, result.unstored_items
    kept = " (run-time limits kept)" if args.keep_limits else ""
    console.print(f"job {args.job} reset: {deleted} keys deleted{kept}")
    if unstored:
        # items are output, not crawl state: a reset never drops what workers have not stored
        console.print(
            f"its item stream is kept: {unstored} entries (crawlfleet items work {args.job})"
        )
    return 0


def _status_table(job: str, status: dict[str, Any]) -> Table:
    counters = status["counters"]
    table = Table(title=f"job {job}", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("queued now", f"{status['queued']:,}")
    table.add_row("leased now", f"{status['leased']:,}")
    table.add_row("sites with work", f"{status['sites']:,}")
    table.add_row("requests done", f"{int(counters.get('acked', 0)):,}")
    table.add_row("duplicates filtered", f"{int(counters.get('duplicates', 0)):,}")
    table.add_row("requeued (leases returned)", f"{int(counters.get('requeued', 0)):,}")
    table.add_row("malformed, set aside", f"{status['malformed_set_aside']:,}")
    table.add_row("live nodes", ", ".join(status["nodes"]) or "none")
    total = status["runs_total"]
    if total:
        stored = ", ".join(f"{s} {n:,}" for s, n in sorted(total["stored"].items())) or "none"
        table.add_row(
            "closed node runs",
            f"{total['nodes']} ({', '.join(total['reasons'])})",
        )
        table.add_row("  pages, items", f"{total['pages']:,}, {total['items']:,}")
        table.add_row("  items stored", stored)
        table.add_row("  errors", f"{total['errors']:,}")
        table.add_row(
            "  first start to last close",
            f"{total['seconds']:.1f} s ({total['pages_per_second']:.1f} pages/s)",
        )
    return table


def _list(args: argparse.Namespace, console: Console) -> int:
    for job in run_on_redis(args, list_jobs):
        console.print(job)
    return 0
