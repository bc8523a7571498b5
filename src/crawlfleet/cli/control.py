"""``crawlfleet control``: pause, resume, drain or stop nodes, or set their concurrency.

Commands go through Redis (see :mod:`crawlfleet.frontier.control`); nodes pick them up
with their next heartbeat and acknowledge them in their status. The command waits
(``--wait``, default 15 s) until every live node it addresses has acknowledged, and
exits 1 naming the nodes that did not.

    crawlfleet control pause JOB                 every node of the job
    crawlfleet control drain JOB --node NODE_ID  one node
    crawlfleet control stop --all                every node of every job
    crawlfleet control concurrency 4 JOB
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from rich.console import Console

from crawlfleet.cli.options import (
    add_redis_options,
    add_settings_option,
    cli_client,
    command_settings,
    resolved_url,
)
from crawlfleet.cli.status import job_names
from crawlfleet.exceptions import ConfigError
from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.control import ACTIONS, ALL_NODES, encode_command
from crawlfleet.redis.keys import JobKeys
from crawlfleet.settings.config import RedisConfig, validate_job_name

NAME = "control"
HELP = "pause, resume, drain or stop nodes, or set their concurrency (through Redis)"

POLL_SECONDS = 0.2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    helps = {
        "pause": "take nothing new, hand back unstarted work, wait for resume",
        "resume": "back to work (lifts pause, drain and stop)",
        "drain": "finish what the node holds, take nothing new, then close",
        "stop": "hand back unstarted work and close now",
    }
    parsers = []
    for action, text in helps.items():
        p = sub.add_parser(action, help=text, description=text)
        parsers.append(p)
    conc = sub.add_parser(
        "concurrency", help="set how many requests a node runs at once (its ceiling)"
    )
    conc.add_argument("n", help="requests at once, 1 to 10000")
    parsers.append(conc)
    for p in parsers:
        p.add_argument("job", nargs="?", help="the job (or --all)")
        p.add_argument("--node", metavar="ID", help="only this node (see crawlfleet status)")
        p.add_argument("--all", action="store_true", help="every node of every job")
        p.add_argument(
            "--wait",
            type=float,
            default=15.0,
            metavar="SECONDS",
            help="wait this long for the nodes' acknowledgements (0: do not wait)",
        )
        add_redis_options(p)
        add_settings_option(p)


def run(args: argparse.Namespace) -> int:
    if args.all == bool(args.job):
        raise ConfigError("name a JOB or give --all (not both)")
    if args.all and args.node:
        raise ConfigError("--node needs a JOB, not --all")
    if args.job:
        validate_job_name(args.job)
    if args.wait < 0:
        raise ConfigError(f"--wait must be >= 0, got {args.wait:g}")
    if args.action == "concurrency":
        kind, value = "concurrency", encode_command("concurrency", args.n)
    else:
        kind, value = "state", ACTIONS[args.action]
    if args.node is not None and (not args.node or any(c in args.node for c in ": \t\r\n")):
        raise ConfigError(f"node id {args.node!r} is not valid (no colon or whitespace)")
    config = RedisConfig.from_settings(command_settings(args))
    url = resolved_url(args, config)
    console = Console()
    scope = args.node or ALL_NODES

    async def main() -> int:
        client = cli_client(url)
        try:
            sent: list[tuple[Frontier, int, list[str]]] = []
            for job in await job_names(client, config.key_prefix, args.job):
                frontier = Frontier(client, JobKeys.of(config.key_prefix, job))
                live = await frontier.live_nodes()
                if args.node and args.node not in live:
                    console.print(f"job {job}: node {args.node} is not alive (command kept)")
                seq = await frontier.send_control(scope, kind, value)
                targets = [args.node] if args.node else live
                console.print(
                    f"job {job}: {args.action} {'' if kind == 'state' else value + ' '}"
                    f"sent to {args.node or 'every node'} (command {seq}; "
                    f"{len(live)} live node(s))"
                )
                sent.append((frontier, seq, [t for t in targets if t in live]))
            if not sent:
                console.print("no jobs in this Redis: nothing to control")
                return 0
            return await _await_acks(console, kind, sent, args.wait)
        finally:
            await client.aclose()

    return asyncio.run(main())  # Redis errors: one line from crawlfleet.cli.main


async def _await_acks(
    console: Console, kind: str, sent: list[tuple[Frontier, int, list[str]]], wait: float
) -> int:
    """Wait until every addressed live node reports a command sequence >= the one sent
    (or has left); 0 if all did, else 1 naming the others."""
    if wait <= 0:
        return 0
    deadline = time.monotonic() + wait
    pending = {(f.keys.job, node): (f, seq) for f, seq, nodes in sent for node in nodes}
    while pending:
        statuses: dict[str, dict[str, dict[str, Any]]] = {}  # one read per job per round
        for (job, node), (frontier, seq) in list(pending.items()):
            if job not in statuses:
                statuses[job] = await frontier.node_statuses()
            status = statuses[job].get(node)
            acked = status.get("control", {}).get(kind, 0) if status else 0
            if status is None or not isinstance(acked, int) or acked >= seq:
                state = "left" if status is None else status.get("state", "?")
                console.print(f"job {job}: node {node} acknowledged ({state})")
                del pending[(job, node)]
        if not pending or time.monotonic() >= deadline:
            break
        await asyncio.sleep(POLL_SECONDS)
    for job, node in pending:
        console.print(f"job {job}: node {node} did not acknowledge within {wait:g}s")
    return 1 if pending else 0
