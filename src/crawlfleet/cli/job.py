"""``crawlfleet job status|reset|list``: look at and administer jobs."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from rich.console import Console
from rich.table import Table

from crawlfleet.cli.options import (
    add_redis_options,
    add_settings_option,
    command_settings,
    resolved_url,
    run_on_frontier,
)
from crawlfleet.frontier.client import Frontier
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import jobs_key
from crawlfleet.settings.config import RedisConfig

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
        add_redis_options(p)
        add_settings_option(p)


async def _status(frontier: Frontier) -> dict[str, Any]:
    counters = await frontier.counters()
    nodes = await frontier.live_nodes()
    client, keys = frontier.client, frontier.keys
    info = {
        n: json.loads(v)
        for n, v in ((_text(k), v) for k, v in (await client.hgetall(keys.nodeinfo)).items())
        if n in nodes
    }
    return {
        "job": keys.job,
        "queued": counters.get("queued", 0),
        "leased": int(await client.zcard(keys.leases)),
        "sites": int(await client.zcard(keys.sites)),
        "malformed_set_aside": int(await client.llen(keys.bad)),
        "counters": counters,
        "nodes": info,
    }


def run(args: argparse.Namespace) -> int:
    console = Console()
    if args.action == "list":
        return _list(args, console)
    if args.action == "status":
        status = run_on_frontier(args, args.job, _status)
        if args.json:
            print(json.dumps(status, indent=2, sort_keys=True))
            return 0
        table = Table(title=f"job {args.job}")
        table.add_column("what")
        table.add_column("value", justify="right")
        for key in ("queued", "leased", "sites", "malformed_set_aside"):
            table.add_row(key, str(status[key]))
        for key, value in sorted(status["counters"].items()):
            table.add_row(f"counter {key}", str(value))
        table.add_row("live nodes", ", ".join(status["nodes"]) or "none")
        console.print(table)
        return 0

    async def reset(frontier: Frontier) -> int | None:
        live = await frontier.live_nodes()
        if live and not args.force:
            console.print(
                f"[red]refusing to reset {args.job}[/]: live nodes {', '.join(live)}"
                " (stop them first, or --force)"
            )
            return None
        return await frontier.reset(keep_limits=args.keep_limits)

    deleted = run_on_frontier(args, args.job, reset)
    if deleted is None:
        return 1
    console.print(f"job {args.job} reset: {deleted} keys deleted")
    return 0


def _list(args: argparse.Namespace, console: Console) -> int:
    config = RedisConfig.from_settings(command_settings(args))

    async def main() -> list[str]:
        client = make_client(resolved_url(args, config))
        try:
            return sorted(_text(j) for j in await client.smembers(jobs_key(config.key_prefix)))
        finally:
            await client.aclose()

    for job in asyncio.run(main()):
        console.print(job)
    return 0


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
