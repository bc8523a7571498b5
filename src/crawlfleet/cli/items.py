"""``crawlfleet items work|status JOB``: item workers on a job's Redis item stream.

``work`` moves the items that nodes appended with ``RedisStreamPipeline`` into a store
(``--to``: a SQLAlchemy URL or ``mongodb://...``) until stopped (SIGINT/SIGTERM: after
the batch in hand; a second signal stops at once, leaving that batch pending for another
worker), or with ``--until-empty`` until the group has nothing left. ``status`` shows
the stream, its dead letters, groups and pending entries per consumer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from rich.console import Console
from rich.table import Table

from crawlfleet.cli.options import (
    add_fleet_options,
    cli_client,
    command_settings,
    resolved_url,
)
from crawlfleet.exceptions import UnknownJob
from crawlfleet.fleet.jobs import require_job
from crawlfleet.frontier.config import validate_job_name
from crawlfleet.pipelines.buffered import BufferedSink
from crawlfleet.pipelines.stream import stream_status
from crawlfleet.pipelines.worker_options import WorkerOptions, WorkerReport, store_for_url
from crawlfleet.pipelines.workers import ItemWorker
from crawlfleet.redis.config import RedisConfig
from crawlfleet.redis.connection import release_embedded
from crawlfleet.redis.keys import JobKeys
from crawlfleet.settings.config import check_unknown

NAME = "items"
HELP = "move items from a job's Redis stream into a store (work), or show the stream (status)"

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    work = sub.add_parser("work", help="move a job's streamed items into a store")
    work.add_argument("job", help="job whose item stream to read")
    work.add_argument(
        "--to",
        required=True,
        metavar="URL",
        help="store: SQLAlchemy URL (sqlite:///items.db, "
        "postgresql+psycopg://user@host/db, mysql+pymysql://...) or "
        "mongodb://host/db",
    )
    work.add_argument(
        "--group",
        metavar="G",
        help="consumer group (default: CRAWLFLEET_ITEMS_GROUP); each group "
        "gets every item, workers of a group share them",
    )
    work.add_argument(
        "--consumer",
        metavar="NAME",
        help="this worker's name in the group (default: <host>-<pid>); a "
        "worker restarted under its name takes its pending entries first",
    )
    work.add_argument(
        "--until-empty",
        action="store_true",
        help="exit once the group has no new and no pending entries",
    )
    work.add_argument(
        "--batch",
        type=int,
        metavar="N",
        help="entries per batch (default: CRAWLFLEET_STORE_BATCH_ITEMS)",
    )
    work.add_argument(
        "--claim-idle",
        type=float,
        metavar="SECONDS",
        help="claim entries another worker has held this long "
        "(default: CRAWLFLEET_ITEMS_CLAIM_IDLE_SECONDS)",
    )
    status = sub.add_parser("status", help="stream length, dead letters, groups, pending")
    status.add_argument("job")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    for p in (work, status):
        add_fleet_options(p)


def run(args: argparse.Namespace) -> int:
    """Run ``work`` or ``status``; a wrong setting or URL raises ConfigError (exit 2)."""
    settings = command_settings(args)
    check_unknown(settings)
    redis_config = RedisConfig.from_settings(settings)
    keys = JobKeys.of(redis_config.key_prefix, validate_job_name(args.job))
    if args.action == "status":
        return _status(resolved_url(args, redis_config), keys, as_json=args.json)
    store = store_for_url(args.to, settings)
    options = WorkerOptions.from_settings(
        settings,
        group=args.group,
        consumer=args.consumer,
        until_empty=args.until_empty or None,
        batch_items=args.batch,
        claim_idle_seconds=args.claim_idle,
    )
    report = asyncio.run(_work(resolved_url(args, redis_config), keys, store, options))
    Console(stderr=True, soft_wrap=True).print(
        f"job {keys.job} group {options.group} consumer {options.consumer}: "
        f"{report.read} read ({report.claimed} claimed), {report.stored} stored, "
        f"{report.dead_lettered} dead-lettered, {report.left_pending} left pending"
    )
    return 0


async def _work(
    url: str, keys: JobKeys, store: BufferedSink, options: WorkerOptions
) -> WorkerReport:
    # one quick retry for a pooled connection cut by a Redis restart; the worker's own
    # back-off handles longer outages
    client = cli_client(url, retry=Retry(NoBackoff(), 1))
    try:
        # Redis unreachable or refusing the credentials now: one line, exit 1 (later
        # outages are ridden out by the worker); a job not seen yet: said, then waited for
        await _require_items(client, keys)
    except UnknownJob as exc:
        logger.warning("%s: waiting for its items", exc)
    except BaseException:
        await client.aclose()
        raise
    worker = ItemWorker(client, keys, store, options)
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        if worker.stopping:
            # second signal: stop at once; the batch in hand stays pending (not lost)
            loop.remove_signal_handler(signum)
            release_embedded()  # not left running by a process ended by a signal
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        logger.warning(
            "Item worker %s stopping after the batch in hand (signal again to stop at once)",
            options.consumer,
        )
        worker.stop()

    signals = (signal.SIGINT, signal.SIGTERM)
    for signum in signals:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        return await worker.run()
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
        await client.aclose()


def _status(url: str, keys: JobKeys, *, as_json: bool) -> int:
    async def main() -> dict[str, Any]:
        client = cli_client(url)
        try:
            await _require_items(client, keys)
            return await stream_status(client, keys)
        finally:
            await client.aclose()

    status = asyncio.run(main())
    if as_json:
        print(json.dumps(status, indent=2, sort_keys=True))
        return 0
    console = Console()
    table = Table(title=f"items of job {keys.job} ({status['stream']})")
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("entries in the stream", str(status["length"]))
    table.add_row("first / last entry", f"{status['first_entry']} / {status['last_entry']}")
    table.add_row("dead letters", str(status["dead_letters"]))
    for group in status["groups"]:
        lag = "?" if group["lag"] is None else str(group["lag"])
        table.add_row(f"group {group['name']}", f"{group['pending']} pending, {lag} unread")
        for consumer in group["consumers"]:
            table.add_row(
                f"  consumer {consumer['name']}",
                f"{consumer['pending']} pending, idle {consumer['idle_ms'] / 1000:.1f} s",
            )
    if not status["groups"]:
        table.add_row("groups", "none (no worker has started)")
    console.print(table)
    return 0


async def _require_items(client: Redis, keys: JobKeys) -> None:
    """UnknownJob unless the job is known or has an item stream (a reset job keeps its
    stream until workers have stored it)."""
    if not await client.exists(keys.items):
        await require_job(client, keys.prefix, keys.job)
