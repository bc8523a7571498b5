"""``crawlfleet seed JOB URL... | --file F``: put start URLs into a job's frontier."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from crawlfleet.cli.options import (
    add_fleet_options,
    command_settings,
    run_on_frontier,
)
from crawlfleet.exceptions import CommandFailed
from crawlfleet.fleet.seeds import SeedResult, parse_entries, queue_seeds
from crawlfleet.frontier.config import FrontierConfig
from crawlfleet.frontier.sharded import JobFrontier

NAME = "seed"
HELP = "add seed URLs (or JSON seed entries) to a job's frontier"


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
    add_fleet_options(parser)


def _entries(args: argparse.Namespace) -> list[str]:
    entries = list(args.urls)
    for path in args.file:
        text = _read(path)
        entries += [
            line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
        ]
    return entries


def _read(path: Path) -> str:
    """The text of seed file *path* ('-': stdin). CommandFailed for a file that is not
    UTF-8 text (a binary file, another encoding); OSError (with its file name) for one
    that cannot be read."""
    stdin = str(path) == "-"
    data = sys.stdin.buffer.read() if stdin else path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CommandFailed(
            f"{'stdin' if stdin else path}: not a seed file (not UTF-8 text: byte "
            f"0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None
    if "\0" in text:
        raise CommandFailed(f"{'stdin' if stdin else path}: not a seed file (binary: a NUL byte)")
    return text


def run(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    settings = command_settings(args)
    config = FrontierConfig.from_settings(settings, args.job)
    result = SeedResult()
    requests = parse_entries(_entries(args), result)
    for n, entry, why in result.invalid:
        console.print(
            f"[yellow]seed {n} skipped[/]: {escape(repr(entry))}: {escape(why)}", soft_wrap=True
        )
    if not requests and not result.invalid:
        console.print("[red]no seeds given[/] (URL arguments or --file)")
        return 2

    async def action(frontier: JobFrontier) -> SeedResult:
        return await queue_seeds(frontier, requests, config.site_key, result)

    if requests:
        run_on_frontier(args, args.job, action, must_exist=False, settings=settings)
    if result.created:
        hint = f": did you mean {result.similar!r}?" if result.similar else ""
        console.print(
            f"[yellow]job {args.job} did not exist: these seeds created it[/]{hint}",
            highlight=False,
        )
    console.print(
        f"job {args.job}: {result.queued} queued, {result.duplicates} already seen, "
        f"{len(result.invalid)} invalid"
    )
    return 1 if result.invalid else 0
