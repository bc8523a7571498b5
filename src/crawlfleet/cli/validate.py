"""``crawlfleet validate SPEC...``: check spider spec files without crawling.

Exit status 0 when every spec is valid (one ``ok`` line each on stdout), 1 when any is
not (its problems on stderr, one ``FILE[:LINE]: PATH: WHAT`` line each).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from crawlfleet.exceptions import ConfigError
from crawlfleet.spiders.spec import load_spec

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "validate"
HELP = "Check spider spec files (YAML or JSON); exit 0 if all are valid, 1 if not."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("specs", nargs="+", type=Path, metavar="SPEC", help="spec file(s)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing for valid specs")


def run(args: argparse.Namespace) -> int:
    status = 0
    for path in args.specs:
        try:
            spec = load_spec(path)
        except ConfigError as exc:
            print(str(exc), file=sys.stderr)
            status = 1
            continue
        if not args.quiet:
            print(
                f"{path}: ok (spider {spec.name!r}, item types: {', '.join(spec.items)}; "
                f"{len(spec.links)} link rule{'s' if len(spec.links) != 1 else ''})"
            )
    return status
