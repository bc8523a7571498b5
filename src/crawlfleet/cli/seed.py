"""``crawlfleet seed JOB URL... | --file F``: put start URLs into a job's frontier."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from scrapy import Request
from scrapy.utils.request import RequestFingerprinter

from crawlfleet.cli.options import (
    add_redis_options,
    add_settings_option,
    command_settings,
    run_on_frontier,
)
from crawlfleet.frontier.client import FINGERPRINT_BYTES, Frontier, Outgoing
from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.frontier.sites import SiteKeyer
from crawlfleet.settings.config import FrontierConfig
from crawlfleet.spiders.seeding import parse_seed

NAME = "seed"
HELP = "add seed URLs (or JSON seed entries) to a job's frontier"
BATCH = 500


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="job name (by default a job is named after its spider)")
    parser.add_argument("urls", nargs="*", metavar="URL", help="URLs or JSON seed entries")
    parser.add_argument(
        "--file",
        "-f",
        type=Path,
        action="append",
        default=[],
        help="read seeds from a file, one per line ('-' for stdin)",
    )
    add_redis_options(parser)
    add_settings_option(parser)


def _entries(args: argparse.Namespace) -> list[str]:
    entries = list(args.urls)
    for path in args.file:
        text = sys.stdin.read() if str(path) == "-" else path.read_text("utf-8")
        entries += [
            line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
        ]
    return entries


def run(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    settings = command_settings(args)
    config = FrontierConfig.from_settings(settings, args.job)
    # Scrapy's default fingerprints; a project with its own REQUEST_FINGERPRINTER_CLASS
    # seeds through the job's seed list instead (its nodes fingerprint those)
    fingerprinter = RequestFingerprinter()
    keyer = SiteKeyer(config.site_key)
    codec = RequestCodec(None)
    requests: list[Request] = []
    invalid = 0
    for n, entry in enumerate(_entries(args), 1):
        try:
            requests.append(parse_seed(entry))
        except ValueError as exc:
            invalid += 1
            console.print(f"[yellow]seed {n} skipped[/]: {entry[:200]!r}: {exc}")
    if not requests and not invalid:
        console.print("[red]no seeds given[/] (URL arguments or --file)")
        return 2

    async def action(frontier: Frontier) -> tuple[int, int]:
        await frontier.register_job()
        queued = dups = 0
        for i in range(0, len(requests), BATCH):
            chunk = requests[i : i + BATCH]
            for r in chunk:
                if keyer.needs_resolving(r):
                    await keyer.resolve(keyer.host(r))
            result = await frontier.commit(
                "seed",
                [
                    Outgoing(
                        fingerprinter.fingerprint(r)[:FINGERPRINT_BYTES],
                        keyer.site(r),
                        r.priority,
                        codec.encode(r),
                    )
                    for r in chunk
                ],
            )
            queued += result.queued
            dups += result.duplicates
        return queued, dups

    queued, dups = (
        run_on_frontier(args, args.job, action, must_exist=False, settings=settings)
        if requests
        else (0, 0)
    )
    console.print(f"job {args.job}: {queued} queued, {dups} already seen, {invalid} invalid")
    return 1 if invalid else 0
