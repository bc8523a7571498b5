"""``crawlfleet limits set|unset|list JOB``: change a job's rate limits while it runs.

Limits written here override ``CRAWLFLEET_RATE_LIMITS``; every node of the job reads
them again with its next heartbeat (within ``CRAWLFLEET_HEARTBEAT_SECONDS``).
"""

from __future__ import annotations

import argparse

from rich.console import Console

from crawlfleet.cli.options import add_redis_options, add_settings_option, run_on_frontier
from crawlfleet.fleet.limits import set_limits, unset_limits
from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.limits import RateLimits

NAME = "limits"
HELP = "set, unset or list a job's per-site rate limits (cluster-wide, at run time)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    set_ = sub.add_parser(
        "set", help="limit a site: crawlfleet limits set JOB '*.example.com' 2/1s"
    )
    set_.add_argument("job")
    set_.add_argument("pattern", help="a host, '*.domain' or '*' (every other site)")
    set_.add_argument("limit", help="H/W: at most H requests per W seconds (2/1s, 30/1m)")
    unset = sub.add_parser("unset", help="remove a run-time limit (the configured one applies)")
    unset.add_argument("job")
    unset.add_argument("pattern")
    show = sub.add_parser("list", help="the job's run-time limits")
    show.add_argument("job")
    for p in (set_, unset, show):
        add_redis_options(p)
        add_settings_option(p)


def run(args: argparse.Namespace) -> int:
    console = Console()
    if args.action == "set":
        RateLimits.parse({args.pattern: args.limit}, source="limit")  # ConfigError: exit 2

    async def action(frontier: Frontier) -> dict[str, str]:
        if args.action == "set":
            return await set_limits(frontier, {args.pattern: args.limit})
        if args.action == "unset":
            return await unset_limits(frontier, [args.pattern])
        return await frontier.read_limits()

    # setting a limit before the job starts is fine; listing or lifting needs the job
    limits = run_on_frontier(args, args.job, action, must_exist=args.action != "set")
    for name, spec in sorted(limits.items()):
        print(f"{name}\t{spec}")  # one line each, also when piped
    if not limits:
        console.print(f"job {args.job}: no run-time limits (CRAWLFLEET_RATE_LIMITS applies)")
    return 0
