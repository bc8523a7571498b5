"""``crawlfleet site``: serve the bundled test website on loopback until interrupted.

Binds only ``127.0.0.1`` .. ``127.0.0.{hosts}``. Once serving, it prints the port on
stdout, writes it to ``--port-file`` (atomically) if given, and logs the seed URLs.
SIGINT and SIGTERM stop it cleanly (exit status 0); the port file is then removed.
``--archive-*`` add the date x category archive (:mod:`crawlfleet.testsite.archive`),
``--ban-*`` and ``--flaky*`` make the site hostile (:mod:`crawlfleet.testsite.hostile`),
``--changing`` makes its content pages change (:mod:`crawlfleet.testsite.changing`).
Also runnable as ``python -m crawlfleet.cli.site`` (what
:func:`crawlfleet.testsite.process.start_site_process` uses).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import logging
import os
import signal
import sys
from pathlib import Path

from crawlfleet.cli.arguments import Option, add_options
from crawlfleet.testsite.archive import DEFAULT_ARCHIVE_START, category_names
from crawlfleet.testsite.changing import Changing, change_mix
from crawlfleet.testsite.hostile import FLAKY_KINDS, Hostile, flaky_kinds
from crawlfleet.testsite.model import MAX_HOSTS, SiteModel
from crawlfleet.testsite.server import SiteServer

__all__ = ["HELP", "NAME", "add_arguments", "main", "run"]

NAME = "site"
HELP = "Serve the bundled test website on loopback (demo, tests, benchmarks)."

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(
        parser,
        Option("--pages", int, 200, "content pages (default: 200)"),
        Option("--hosts", int, 3, f"loopback hosts, 1..{MAX_HOSTS} (default: 3)"),
        Option("--seed", int, 1, "link graph seed (default: 1)"),
        Option("--links-per-page", int, 6, "random links per page (default: 6)"),
        Option(
            "--menu-pages",
            int,
            0,
            "the menu of every page also links to its host's first N pages "
            "(navigation links repeated on every page; default: 0)",
        ),
        Option("--articles", int, None, "article pages (default: a tenth)"),
        Option("--latency", float, 0.0, "seconds added to every response"),
        Option("--timeout-seconds", float, 30.0, "seconds before /slow answers (default: 30)"),
        Option(
            "--stall-tick-ms",
            float,
            0.0,
            "run a ticker of this period that notes how late it fires: the site's own "
            "event-loop stalls, in /_stats as loop_stalls (default: 0, none)",
        ),
    )
    parser.add_argument(
        "--no-problems",
        action="store_true",
        help="no error, redirect, slow, odd-file or legacy-encoding pages",
    )
    archive = parser.add_argument_group("archive (date x category units on 127.0.0.1)")
    add_options(
        archive,
        Option("--archive-dates", int, 0, "consecutive days (default: 0, no archive)", metavar="N"),
        Option(
            "--archive-categories", int, 0, "categories c00, c01, ... (default: 0)", metavar="N"
        ),
        Option(
            "--archive-start",
            str,
            DEFAULT_ARCHIVE_START.isoformat(),
            f"first day, YYYY-MM-DD (default: {DEFAULT_ARCHIVE_START.isoformat()})",
            metavar="DATE",
        ),
    )
    hostile = parser.add_argument_group("hostile mode (all off by default)")
    add_options(
        hostile,
        Option(
            "--ban-rate",
            int,
            0,
            "ban a client sending more than N requests within 1 s (default: 0, never)",
            metavar="N",
        ),
        Option("--ban-seconds", float, 10.0, "how long a ban lasts (default: 10)", metavar="S"),
        Option(
            "--ban-by",
            str,
            "ip",
            "a client is its peer IP address or its User-Agent (default: ip)",
            metavar="{ip,ua}",
        ),
        Option(
            "--flaky",
            float,
            0.0,
            "share of URLs that fail at first, 0..1 (default: 0)",
            metavar="SHARE",
        ),
        Option(
            "--flaky-attempts",
            int,
            1,
            "requests a flaky URL fails before it is served (default: 1)",
            metavar="K",
        ),
        Option(
            "--flaky-kinds",
            str,
            ",".join(FLAKY_KINDS),
            f"comma-separated failure kinds (default: {','.join(FLAKY_KINDS)})",
            metavar="KINDS",
        ),
    )
    changing = parser.add_argument_group(
        "changing mode (off by default)",
        "Content pages change on schedules drawn from --seed: a new version every "
        "minute, every hour, never, or only a new updated_at timestamp on every fetch "
        "('stamp'). A new version changes the product's price or the article's "
        "headline. In each class a share of the pages sends ETag and Last-Modified and "
        "answers conditional requests with 304 while unchanged. GET /_stats adds "
        "'changing': per class, per validators group and in total: fetches, fetches "
        "of unchanged pages, 304s, changes made, picked up, missed and pending, and "
        "pick-up delays (median, p95).",
    )
    changing.add_argument(
        "--changing", action="store_true", help="content pages change (default: static)"
    )
    add_options(
        changing,
        Option(
            "--time-scale",
            float,
            1.0,
            "site seconds per real second: 60 makes 'hourly' pages change every minute "
            "(default: 1)",
            metavar="X",
        ),
        Option(
            "--validators",
            float,
            0.5,
            "share of each class's pages that send ETag and Last-Modified (default: 0.5)",
            metavar="SHARE",
        ),
        Option(
            "--change-mix",
            str,
            Changing().spec,
            f"weights of the page classes (default: {Changing().spec})",
            metavar="MIX",
        ),
    )
    add_options(
        parser,
        Option("--port", int, 0, "port (default: 0, a free one)"),
        Option("--port-file", Path, None, "write the bound port to this file"),
    )


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; 0 on a clean stop, 2 on bad options, 1 if the
    addresses cannot be bound."""
    try:
        model = SiteModel(
            pages=args.pages,
            hosts=args.hosts,
            seed=args.seed,
            links_per_page=args.links_per_page,
            problems=not args.no_problems,
            articles=args.articles,
            archive_dates=args.archive_dates,
            archive_categories=category_names(args.archive_categories),
            archive_start=_iso_date(args.archive_start),
            menu_pages=args.menu_pages,
        )
        hostile = Hostile(
            ban_rate=args.ban_rate,
            ban_seconds=args.ban_seconds,
            ban_by=args.ban_by,
            flaky=args.flaky,
            flaky_attempts=args.flaky_attempts,
            flaky_kinds=flaky_kinds(args.flaky_kinds),
        )
        changing = (
            Changing(
                time_scale=args.time_scale,
                validators=args.validators,
                mix=change_mix(args.change_mix),
            )
            if args.changing
            else None
        )
        server = SiteServer(
            model,
            port=args.port,
            latency_seconds=args.latency,
            timeout_seconds=args.timeout_seconds,
            hostile=hostile,
            changing=changing,
            stall_tick_seconds=args.stall_tick_ms / 1000,
        )
    except ValueError as exc:
        logger.error("invalid option: %s", exc)
        return 2
    try:
        asyncio.run(_serve(server, args.port_file))
    except OSError as exc:
        logger.error("cannot serve the test site: %s", exc)
        return 1
    return 0


async def _serve(server: SiteServer, port_file: Path | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    port = await server.start()
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if port_file is not None:
            _write_atomically(port_file, f"{port}\n")
        model = server.model
        logger.info(
            "test site: %d pages (%d articles) on %d hosts, port %d, problems %s",
            model.pages,
            model.articles,
            model.hosts,
            port,
            "on" if model.problems else "off",
        )
        for url in server.seed_urls:
            logger.info("seed URL %s", url)
        archive = model.archive
        if archive:
            logger.info(
                "archive: %d units (%d dates from %s, %d categories), %d URLs",
                archive.unit_count(),
                len(archive.dates),
                archive.dates[0],
                len(archive.categories),
                archive.url_count(),
            )
        hostile = server.hostile
        if hostile.ban_rate:
            logger.info(
                "hostile: more than %d requests/s from one %s bans it for %g s",
                hostile.ban_rate,
                hostile.ban_by,
                hostile.ban_seconds,
            )
        if hostile.flaky:
            logger.info(
                "hostile: %d flaky URLs fail %d time(s) (%s)",
                len(hostile.flaky_locs(model)),
                hostile.flaky_attempts,
                ",".join(hostile.flaky_kinds),
            )
        schedule = server.schedule
        if schedule is not None:
            classes = ", ".join(
                f"{name} {len(schedule.pages_of(name))}" for name, _ in schedule.changing.mix
            )
            logger.info(
                "changing: %s pages; %g site seconds per second; %g of them with validators",
                classes,
                schedule.changing.time_scale,
                schedule.changing.validators,
            )
        print(port, flush=True)
        await stop.wait()
        logger.info("test site stopping")
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await server.stop()
        if port_file is not None:
            with contextlib.suppress(FileNotFoundError):
                port_file.unlink()


def _iso_date(value: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise ValueError(f"archive_start must be a date YYYY-MM-DD, got {value!r}") from None


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``python -m crawlfleet.cli.site``."""
    parser = argparse.ArgumentParser(prog="crawlfleet site", description=HELP)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s [%(name)s] %(levelname)s: %(message)s",
    )
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
