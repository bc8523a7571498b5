"""The ``crawlfleet`` command: one module per sub-command.

Each command module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int`` (the exit status). Options shared by several commands are declared
once in :mod:`crawlfleet.cli.options`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from redis.exceptions import RedisError

from crawlfleet.cli.options import UnknownJob, redis_problem
from crawlfleet.exceptions import ConfigError

__all__ = ["COMMANDS", "main"]

#: Command modules, in the order ``crawlfleet --help`` lists them.
COMMANDS = (
    "demo",
    "crawl",
    "seed",
    "job",
    "limits",
    "control",
    "status",
    "health",
    "items",
    "site",
    "validate",
    "extract",
    "bench",
)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with *only*, just that command's module is imported (a node process
    then skips what the other commands import: SQLAlchemy, aiohttp, pymongo...)."""
    parser = argparse.ArgumentParser(
        prog="crawlfleet",
        description="Distributed Scrapy crawling on a shared Redis frontier.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS if only is None else (only,):
        module = importlib.import_module(f"crawlfleet.cli.{name}")
        command = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(
            _run=module.run, _scrapy_logging=getattr(module, "SCRAPY_LOGGING", False)
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(first if first in COMMANDS else None).parse_args(argv)
    if not getattr(args, "_scrapy_logging", False):
        logging.basicConfig(
            level=logging.DEBUG if args.verbose else logging.INFO,
            format="%(asctime)s [%(name)s] %(levelname)s: %(message)s",
        )
    try:
        return int(args._run(args))
    except UnknownJob as exc:
        print(f"crawlfleet {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except ConfigError as exc:
        print(f"crawlfleet {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except RedisError as exc:
        print(f"crawlfleet {args.command}: error: {redis_problem(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
