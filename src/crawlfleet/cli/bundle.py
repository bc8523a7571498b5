"""``crawlfleet bundle``: crawlfleet and everything it needs in one file, to run nodes
on machines with nothing but Python (same minor version, any patch release, and platform
as here) installed.

    crawlfleet bundle -o crawlfleet-node.pyz --project .
    scp crawlfleet-node.pyz node.toml host:/opt/crawlfleet/
    ssh host python3 /opt/crawlfleet/crawlfleet-node.pyz crawl myspider --job shop \\
        --config /opt/crawlfleet/node.toml

docs/deploy.md has a systemd unit and a compose file that run it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

NAME = "bundle"
HELP = "pack crawlfleet (and a Scrapy project) into one file that runs a node anywhere"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("crawlfleet-node.pyz"),
        help="the file to write (default crawlfleet-node.pyz)",
    )
    parser.add_argument(
        "--project",
        type=Path,
        help="a Scrapy project directory (with scrapy.cfg) to include: its spiders and "
        "settings become the bundle's",
    )
    parser.add_argument(
        "--python",
        default="/usr/bin/env python3",
        help="the interpreter line of the file (default '/usr/bin/env python3')",
    )
    parser.add_argument(
        "--no-download",
        dest="download",
        action="store_false",
        help="do not download (pip) what other patch releases of this Python need and is "
        "not installed here: the bundle then refuses to start on them, saying what is missing",
    )


def run(args: argparse.Namespace) -> int:
    from crawlfleet.bundle.builder import build_bundle  # packaging, zipapp: here only

    console = Console(stderr=True)
    console.print(f"bundling crawlfleet into {args.output} ...")
    bundle = build_bundle(
        args.output, project=args.project, interpreter=args.python, download=args.download
    )
    what = f"{len(bundle.distributions)} distributions"
    if bundle.downloaded:
        what += f" ({', '.join(bundle.downloaded)} downloaded for other patch releases)"
    if bundle.settings_module:
        what += f" and the project {bundle.settings_module}"
    console.print(
        f"{bundle.path}: {bundle.size_bytes / 2**20:.1f} MiB, bundle {bundle.id}, {what}",
        highlight=False,
    )
    minor = "{}.{}".format(*sys.version_info[:2])
    for m in bundle.missing:
        patches = ", ".join(f"{minor}.{p}" for p in m.patches[:5])
        patches += "..." if len(m.patches) > 5 else ""
        console.print(
            f"not in the bundle: {m.requirement} ({m.marker}): it refuses to start on "
            f"Python {patches}",
            highlight=False,
            markup=False,
        )
    print(bundle.path)
    return 0
