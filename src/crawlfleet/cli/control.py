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

from redis.asyncio import Redis
from rich.console import Console

from crawlfleet.cli.arguments import Option, add_options
from crawlfleet.cli.options import add_fleet_options, run_on_redis
from crawlfleet.exceptions import ConfigError
from crawlfleet.fleet.control import await_acks, command_value, send_command, valid_node_id
from crawlfleet.frontier.config import validate_job_name

NAME = "control"
HELP = "pause, resume, drain or stop nodes, or set their concurrency (through Redis)"


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
        add_options(
            p,
            Option(
                "--wait",
                float,
                15.0,
                "wait this long for the nodes' acknowledgements (0: do not wait)",
                metavar="SECONDS",
            ),
        )
        add_fleet_options(p)


def run(args: argparse.Namespace) -> int:
    if args.all == bool(args.job):
        raise ConfigError("name a JOB or give --all (not both)")
    if args.all and args.node:
        raise ConfigError("--node needs a JOB, not --all")
    if args.job:
        validate_job_name(args.job)
    if args.wait < 0:
        raise ConfigError(f"--wait must be >= 0, got {args.wait:g}")
    command_value(args.action, getattr(args, "n", None))  # ConfigError before Redis
    if args.node is not None:
        valid_node_id(args.node)
    console = Console()

    async def main(client: Redis, prefix: str) -> int:
        sent = await send_command(
            client,
            prefix,
            args.job,
            args.action,
            getattr(args, "n", None),
            node=args.node,
        )
        for s in sent:
            if args.node and args.node not in s.targets:
                console.print(f"job {s.job}: node {args.node} is not alive (command kept)")
            what = args.action if args.action != "concurrency" else f"concurrency {s.value}"
            console.print(
                f"job {s.job}: {what} sent to {args.node or 'every node'} "
                f"(command {s.seq}; {s.live} live node(s))"
            )
        if not sent:
            console.print("no jobs in this Redis: nothing to control")
            return 0
        if args.wait <= 0:
            return 0
        await await_acks(client, prefix, sent, args.wait)
        for s in sent:
            for node, state in s.acked.items():
                console.print(f"job {s.job}: node {node} acknowledged ({state})")
            for node in s.pending:
                console.print(f"job {s.job}: node {node} did not acknowledge within {args.wait:g}s")
        return 1 if any(s.pending for s in sent) else 0

    return run_on_redis(args, main)  # Redis errors: one line from crawlfleet.cli.main
