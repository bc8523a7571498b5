"""``crawlfleet seed JOB URL... | --file F``: put start URLs into a job's frontier.

The entries (URL arguments, then each file's lines) are read as a stream and committed
in batches as they are read (:func:`crawlfleet.fleet.seeds.queue_seeds`): memory stays
flat in their number, and a seeding that stops part way is finished by running it
again. Every file is opened, and each regular file checked to be UTF-8 text, before
anything is queued; stdin (``-``) and pipes are checked as they are read."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from rich.console import Console
from rich.markup import escape
from scrapy.settings import Settings

from crawlfleet.cli.options import (
    add_fleet_options,
    command_settings,
    run_on_frontier,
)
from crawlfleet.exceptions import CommandFailed
from crawlfleet.fleet.seedform import SeedForm
from crawlfleet.fleet.seeds import SeedResult, queue_seeds, seed_batches
from crawlfleet.frontier.config import FrontierConfig
from crawlfleet.frontier.sharded import JobFrontier

NAME = "seed"
HELP = "add seed URLs (or JSON seed entries) to a job's frontier"

#: Bytes of a seed file read at once.
CHUNK = 1 << 16
#: A line longer than this is no seed file's (and would be held whole in memory).
MAX_LINE = 1 << 20
#: Seconds between progress lines on stderr (none for a seeding done sooner).
PROGRESS_SECONDS = 2.0


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


def _name(path: Path) -> str:
    return "stdin" if str(path) == "-" else str(path)


def _open(path: Path) -> BinaryIO:
    """Seed file *path* ('-': stdin), open; OSError (with its file name) if it cannot be."""
    return sys.stdin.buffer if str(path) == "-" else path.open("rb")


def _texts(stream: BinaryIO, name: str) -> Iterator[str]:
    """The text of seed input *stream* in pieces that end at a line's end, read CHUNK
    bytes at a time. CommandFailed for input that is not UTF-8 text (a binary file,
    another encoding), with the offset of the first byte that is not."""
    read = getattr(stream, "read1", stream.read)  # what a pipe has now: no waiting for more
    offset = 0  # of the first byte of *rest* in the input
    rest = b""
    while True:
        chunk = read(CHUNK)
        data = rest + chunk if rest else chunk
        if chunk:
            cut = data.rfind(b"\n") + 1  # "\n" is never part of a multi-byte character
            if not cut:
                if len(data) > MAX_LINE:
                    raise CommandFailed(
                        f"{name}: not a seed file (a line of more than {MAX_LINE} bytes at "
                        f"offset {offset})"
                    )
                rest = data
                continue
            data, rest = data[:cut], data[cut:]
        else:  # the end: the last line, if it has no "\n"
            rest = b""
        if not data:
            return
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CommandFailed(
                f"{name}: not a seed file (not UTF-8 text: byte "
                f"0x{data[exc.start]:02x} at offset {offset + exc.start})"
            ) from None
        if "\0" in text:
            raise CommandFailed(f"{name}: not a seed file (binary: a NUL byte)")
        offset += len(data)
        yield text


def _lines(stream: BinaryIO, name: str) -> Iterator[str]:
    """The entries of seed input *stream*: its lines but blank ones and # comments
    (lines as ``str.splitlines`` reads them)."""
    for text in _texts(stream, name):
        for line in text.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                yield line


def _entries(urls: Iterable[str], inputs: list[tuple[BinaryIO, str]]) -> Iterator[str]:
    yield from urls
    for stream, name in inputs:
        yield from _lines(stream, name)


class _Report:
    """What a seeding says on stderr as it goes: the invalid entries kept (one line
    each) and, once it has taken PROGRESS_SECONDS, a progress line that often."""

    def __init__(self, console: Console, job: str) -> None:
        self.console = console
        self.job = job
        self.listed = 0
        self.started = time.monotonic()
        self.next = self.started + PROGRESS_SECONDS

    def invalid(self, result: SeedResult) -> None:
        for n, entry, why in result.invalid[self.listed :]:
            self.console.print(
                f"[yellow]seed {n} skipped[/]: {escape(repr(entry))}: {escape(why)}",
                soft_wrap=True,
            )
        self.listed = len(result.invalid)

    def __call__(self, result: SeedResult) -> None:
        self.invalid(result)
        now = time.monotonic()
        if now < self.next:
            return
        self.next = now + PROGRESS_SECONDS
        rate = result.entries / (now - self.started)
        self.console.print(
            f"seeding job {self.job}: {result.entries:,} entries read, {result.queued:,} "
            f"queued, {result.duplicates:,} already seen, {result.invalid_count:,} invalid "
            f"({rate:,.0f} entries/s)",
            highlight=False,
            soft_wrap=True,
        )

    def unlisted(self, result: SeedResult) -> None:
        self.invalid(result)
        more = result.invalid_count - self.listed
        if more:
            self.console.print(f"[yellow]{more:,} more invalid entries not listed[/]")


def run(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    settings = command_settings(args)
    config = FrontierConfig.from_settings(settings, args.job)
    result = SeedResult()
    report = _Report(console, args.job)
    with contextlib.ExitStack() as files:
        inputs: list[tuple[BinaryIO, str]] = []
        for path in args.file:
            stream = _open(path)
            if stream is not sys.stdin.buffer:
                files.callback(stream.close)
            inputs.append((stream, _name(path)))
        for stream, name in inputs:  # a file that is not text: refused before any seed
            if stream.seekable():
                start = stream.tell()
                for _ in _texts(stream, name):
                    pass
                stream.seek(start)
        batches = seed_batches(_entries(args.urls, inputs), result)
        report.invalid(result)
        if batches is not None:
            _queue(args, settings, config, batches, result, report)
        elif not result.invalid_count:
            console.print("[red]no seeds given[/] (URL arguments or --file)")
            return 2
    report.unlisted(result)
    if result.created:
        hint = f": did you mean {result.similar!r}?" if result.similar else ""
        console.print(
            f"[yellow]job {args.job} did not exist: these seeds created it[/]{hint}",
            highlight=False,
        )
    console.print(
        f"job {args.job}: {result.queued} queued, {result.duplicates} already seen, "
        f"{result.invalid_count} invalid"
    )
    return 1 if result.invalid_count else 0


def _queue(
    args: argparse.Namespace,
    settings: Settings,
    config: FrontierConfig,
    batches: Iterator[list[SeedForm]],
    result: SeedResult,
    report: _Report,
) -> None:
    """Commit *batches* to the job's frontier, counting into *result*."""

    async def action(frontier: JobFrontier) -> SeedResult:
        return await queue_seeds(frontier, batches, config.site_key, result, progress=report)

    try:
        run_on_frontier(args, args.job, action, must_exist=False, settings=settings)
    except CommandFailed as exc:  # stdin or a pipe that turned out not to be text
        if result.queued or result.duplicates:
            raise CommandFailed(
                f"{exc}; the {result.queued + result.duplicates:,} seeds before it are "
                "queued (or were already seen): once it is fixed, seed it all again, "
                "nothing is queued twice"
            ) from None
        raise
