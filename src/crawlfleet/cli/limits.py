"""``crawlfleet limits set|unset|list``: change rate limits while crawls run.

``--fleet`` limits override ``CRAWLFLEET_RATE_LIMITS`` for every job, and each site they
cover has one budget shared by every job that crawls it. A job's own limits (``limits
set JOB ...``) give that job a budget of its own for the sites they cover. Every node
reads them again with its next heartbeat (within ``CRAWLFLEET_HEARTBEAT_SECONDS``).
"""

from __future__ import annotations

import argparse

from redis.asyncio import Redis
from rich.console import Console

from crawlfleet.cli.options import add_fleet_options, run_on_redis
from crawlfleet.exceptions import ConfigError
from crawlfleet.fleet.jobs import require_job
from crawlfleet.fleet.limits import read_limits, set_limits, unset_limits
from crawlfleet.frontier.config import validate_job_name
from crawlfleet.frontier.limits import RateLimits

NAME = "limits"
HELP = "set, unset or list per-site rate limits, the fleet's or a job's own (at run time)"

_FLEET_HELP = "the fleet's limits: one budget per site for every job (no JOB)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    set_ = sub.add_parser(
        "set",
        help="limit a site: crawlfleet limits set --fleet '*.example.com' 2/1s "
        "(or JOB '*.example.com' 2/1s: that job's own budget)",
    )
    set_.add_argument(
        "words",
        nargs="+",
        metavar="[JOB] PATTERN LIMIT",
        help="PATTERN: a host, '*.domain' or '*'; LIMIT: H/W, at most H requests per W "
        "seconds (2/1s, 30/1m), or none",
    )
    unset = sub.add_parser("unset", help="remove a run-time limit (the configured one applies)")
    unset.add_argument("words", nargs="+", metavar="[JOB] PATTERN")
    show = sub.add_parser("list", help="the run-time limits of the fleet, or of JOB")
    show.add_argument("words", nargs="*", metavar="JOB")
    for p in (set_, unset, show):
        p.add_argument("--fleet", action="store_true", help=_FLEET_HELP)
        add_fleet_options(p)


#: action -> (words after JOB, how it is used)
_SHAPES = {
    "set": (2, "limits set takes JOB PATTERN LIMIT, or --fleet PATTERN LIMIT"),
    "unset": (1, "limits unset takes JOB PATTERN, or --fleet PATTERN"),
    "list": (0, "limits list takes JOB, or --fleet (or nothing) for the fleet's"),
}


def _split(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    """(job or None for the fleet, the words after it); ConfigError when they do not
    fit the action."""
    rest, usage = _SHAPES[args.action]
    words: list[str] = list(args.words)
    fleet = args.fleet or (args.action == "list" and not words)
    if len(words) != rest + (0 if fleet else 1):
        raise ConfigError(usage)
    if fleet:
        return None, words
    return validate_job_name(words[0]), words[1:]


def run(args: argparse.Namespace) -> int:
    console = Console()
    job, rest = _split(args)  # ConfigError: exit 2
    if args.action == "set":
        RateLimits.parse({rest[0]: rest[1]}, source="limit")

    async def action(client: Redis, prefix: str) -> dict[str, str]:
        # setting a job's limit before the job starts is fine; listing or lifting needs it
        if job is not None and args.action != "set":
            await require_job(client, prefix, job)
        if args.action == "set":
            return await set_limits(client, prefix, job, {rest[0]: rest[1]})
        if args.action == "unset":
            return await unset_limits(client, prefix, job, [rest[0]])
        return await read_limits(client, prefix, job)

    limits = run_on_redis(args, action)
    for name, spec in sorted(limits.items()):
        print(f"{name}\t{spec}")  # one line each, also when piped
    if not limits:
        whose = "the fleet" if job is None else f"job {job}"
        fallback = "CRAWLFLEET_RATE_LIMITS" if job is None else "the fleet's limits"
        console.print(f"{whose}: no run-time limits ({fallback} apply)")
    return 0
