"""``crawlfleet errors list|stats|export|recrawl JOB``: the job's error registry.

Nodes record every request that fails for good (``CRAWLFLEET_ERRORS``) in the state DB
(``CRAWLFLEET_STATE_DB_URL``); these commands read it and put failures back into the
frontier. ``list`` prints one failure a line (reason, failures, detail, URL); ``export``
writes them all as JSON lines (stacks included); ``recrawl`` queues the open ones again
(needs the job's Redis too); with ``--wait`` it stays until the job's nodes have fetched
them all, saying how far they got every ``CRAWLFLEET_PROGRESS_SECONDS``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from crawlfleet.cli.options import (
    add_redis_options,
    add_settings_option,
    command_settings,
    open_state_db,
    run_on_frontier,
)
from crawlfleet.fleet.errors import RecrawlResult, recrawl_errors, recrawl_standing
from crawlfleet.frontier.config import BackoffConfig, validate_job_name
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.node.progress import Cadence, progress_seconds, recrawl_line
from crawlfleet.state.db import state_db_url
from crawlfleet.state.errors import REASONS, STATES, error_stats, list_errors

NAME = "errors"
HELP = "list, count, export or re-crawl a job's failed requests (the error registry)"
#: Rows read at a time by export.
PAGE = 1000
#: recrawl --wait looks at the registry this often.
WAIT_LOOK_SECONDS = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = sub.add_parser("list", help="one failure a line: reason, failures, detail, URL")
    stats = sub.add_parser("stats", help="counts by state, reason and site")
    export = sub.add_parser("export", help="every failure as JSON lines (with stacks)")
    recrawl = sub.add_parser("recrawl", help="queue the open failures again")
    for p in (listing, stats, export, recrawl):
        p.add_argument("job")
        p.add_argument("--db", metavar="URL", help="state DB URL (default CRAWLFLEET_STATE_DB_URL)")
        add_settings_option(p)
    for p in (listing, export, recrawl):
        p.add_argument("--reason", choices=REASONS, help="only failures of this reason")
    for p in (listing, export):
        p.add_argument("--state", choices=(*STATES, "all"), default="open", help="default: open")
    listing.add_argument("--limit", type=_positive, default=100, help="at most N lines (100)")
    export.add_argument("-o", "--output", metavar="FILE", help="write here (default stdout)")
    recrawl.add_argument("--limit", type=_positive, default=10_000, help="at most N (10000)")
    recrawl.add_argument(
        "--wait",
        action="store_true",
        help="stay until the job's nodes have fetched them, saying how far they got",
    )
    add_redis_options(recrawl)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    job = validate_job_name(args.job)
    settings = command_settings(args)  # --db is CRAWLFLEET_STATE_DB_URL
    db = open_state_db(state_db_url(settings))
    try:
        if args.action == "list":
            return _list(db, job, args)
        if args.action == "stats":
            return _stats(db, job)
        if args.action == "export":
            return _export(db, job, args)

        console = Console(stderr=True)
        every = progress_seconds(settings)
        half_life_ms = int(BackoffConfig.from_settings(settings).half_life_seconds * 1000)

        async def action(frontier: JobFrontier) -> RecrawlResult:
            result = await recrawl_errors(frontier, db, reason=args.reason, limit=args.limit)
            by_url = f" ({len(result.by_url)} by URL only)" if result.by_url else ""
            _say(console, f"job {job}: {result.queued} failed request(s) queued again{by_url}")
            if result.invalid:
                _say(
                    console,
                    f"job {job}: {len(result.invalid)} failed request(s) left open: no stored "
                    "request, and a URL that is not http(s) with a host",
                )
            if args.wait and result.ids:
                await _wait(frontier, db, result.ids, every, half_life_ms, console)
            return result

        run_on_frontier(args, job, action, must_exist=False, settings=settings)
        return 0
    finally:
        db.close()


def _say(console: Console, line: str) -> None:
    """One line on stderr, as it is: unwrapped, without markup (a site may be ``[::1]``)."""
    console.print(line, markup=False, highlight=False, soft_wrap=True)


async def _wait(
    frontier: JobFrontier,
    db: Any,
    ids: Sequence[int],
    every: float,
    half_life_ms: int,
    console: Console,
) -> None:
    """Until none of the errors *ids* waits in the frontier any more: a progress line
    every *every* seconds (none in a shorter wait; 0: none), the first of them followed
    by a word when no node of the job is running to fetch them, and the tally at the
    end."""
    cadence = Cadence(every)
    cadence.start()
    first = True
    while True:
        await asyncio.sleep(WAIT_LOOK_SECONDS)
        progress, backoff = await recrawl_standing(frontier, db, ids, half_life_ms=half_life_ms)
        if not progress["queued"]:
            _say(console, str(recrawl_line(progress, 0, seconds=cadence.elapsed())))
            return
        if not cadence.due():
            continue
        _say(console, str(recrawl_line(progress, 0, backoff)))
        if first and not await frontier.live_nodes():
            job = frontier.keys.job
            _say(
                console,
                f"no node of job {job} is running: the failures wait in its frontier "
                f"(start one: crawlfleet crawl SPIDER --job {job})",
            )
        first = False


def _state(args: argparse.Namespace) -> str | None:
    return None if args.state == "all" else str(args.state)


def _list(db: Any, job: str, args: argparse.Namespace) -> int:
    rows = list_errors(db, job, reason=args.reason, state=_state(args), limit=args.limit)
    for e in rows:
        print(f"{e['reason']}\t{e['failures']}\t{e['detail']}\t{e['url']}")
    if not rows:
        Console(stderr=True).print(f"job {job}: no {args.state} failure in {db.shown}")
    return 0


def _stats(db: Any, job: str) -> int:
    stats = error_stats(db, job)
    print(f"job {job}: {stats['total']} failed request(s) in {db.shown}")
    for state, n in stats["by_state"].items():
        print(f"  {state:<9}{n:>9}")
    for reason, n in stats["open_by_reason"].items():
        print(f"  open, {reason:<11}{n:>7}")
    for site, n in stats["open_by_site"].items():
        print(f"  open on {site}: {n}")
    return 0


def _export(db: Any, job: str, args: argparse.Namespace) -> int:
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout  # noqa: SIM115
    count = 0
    try:
        offset = 0
        while True:
            rows = list_errors(
                db,
                job,
                reason=args.reason,
                state=_state(args),
                limit=PAGE,
                offset=offset,
                stack=True,
                by_id=True,
            )
            for e in rows:
                out.write(json.dumps({"job": job, **e}, ensure_ascii=False) + "\n")
            count += len(rows)
            offset += PAGE
            if len(rows) < PAGE:
                break
    finally:
        if out is not sys.stdout:
            out.close()
    if args.output:
        Console(stderr=True).print(f"{count} failure(s) written to {args.output}")
    return 0
