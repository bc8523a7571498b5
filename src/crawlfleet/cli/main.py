"""The ``crawlfleet`` command: one module per sub-command.

Each command module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int`` (the exit status). Options shared by several commands are declared
once in :mod:`crawlfleet.cli.options`.

Expected failures are one line on stderr, ``crawlfleet COMMAND: error: ...``, and a
non-zero exit, never a traceback: 1 for Redis (unreachable, hung, refusing the
credentials; its URL with the password as ``***``), an unknown job, a file that cannot be
read; 2 for a wrong setting, option or argument (with a suggestion for a misspelt one).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import sys
from collections.abc import Iterator, Sequence
from typing import NoReturn

# nothing heavier at the top: main() decides what to load (see NODE_COMMAND)

__all__ = ["COMMANDS", "CommandParser", "main"]

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
    "errors",
    "campaign",
    "proxies",
    "manager",
    "deploy",
    "bundle",
    "site",
    "validate",
    "extract",
    "bench",
)


#: The command that runs a node. Its process starts with the cyclic garbage collector
#: off, before Scrapy and Redis are imported: start-up builds about 90,000 objects that
#: live as long as the node, and the collector's passes over them (about 220, a fifth of
#: the start) find nearly nothing; the command freezes them and turns it back on once its
#: engine has started (crawlfleet.cli.crawl).
NODE_COMMAND = "crawl"


class CommandParser(argparse.ArgumentParser):
    """argparse with a usage error as one line (``crawlfleet seed: error: ...``)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """*parser* and every sub-command parser below it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases: once
                yield from _parsers(sub)


def _leaf(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub-)command that *args* selected."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(args, action.dest or "", None)
            if isinstance(chosen, str) and chosen in action.choices:
                return _leaf(action.choices[chosen], args)
    return parser


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with *only*, just that command's module is imported (a node process
    then skips what the other commands import: SQLAlchemy, aiohttp, pymongo...)."""
    parser = CommandParser(
        prog="crawlfleet",
        description="Distributed Scrapy crawling on a shared Redis frontier.",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="say which settings, Redis and job; debug logs"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS if only is None else (only,):
        module = importlib.import_module(f"crawlfleet.cli.{name}")
        command = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(
            _run=module.run, _scrapy_logging=getattr(module, "SCRAPY_LOGGING", False)
        )
    for each in _parsers(parser):
        if each is not parser and "-v" not in each._option_string_actions:
            # -v also after the command; SUPPRESS: absent, it leaves the one before alone
            each.add_argument(
                "-v",
                "--verbose",
                action="store_true",
                default=argparse.SUPPRESS,
                help="say which settings, Redis and job; debug logs",
            )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    if first != NODE_COMMAND:
        return _main(argv, first)
    gc.disable()  # see NODE_COMMAND
    try:
        return _main(argv, first)
    finally:
        gc.enable()  # a node that stopped before its engine started (or a usage error)


def _main(argv: list[str], first: str | None) -> int:
    from redis.exceptions import RedisClusterException, RedisError

    from crawlfleet.cli.options import redis_problem
    from crawlfleet.exceptions import CommandFailed, ConfigError, EmbeddedRedisError, UnknownJob

    parser = build_parser(first if first in COMMANDS else None)
    args, extra = parser.parse_known_args(argv)
    if extra:
        _leaf(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "_scrapy_logging", False):
        logging.basicConfig(
            level=logging.INFO,
            format="%(asctime)s [%(name)s] %(levelname)s: %(message)s",
        )
        if args.verbose:
            logging.getLogger("crawlfleet").setLevel(logging.DEBUG)
        logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    prog = _leaf(parser, args).prog  # "crawlfleet job reset"
    try:
        return int(args._run(args))
    except (UnknownJob, CommandFailed) as exc:
        return _fail(prog, str(exc), 1)
    except ConfigError as exc:
        return _fail(prog, str(exc), 2)
    except (RedisError, RedisClusterException) as exc:
        return _fail(prog, redis_problem(exc), 1)
    except EmbeddedRedisError as exc:
        return _fail(prog, f"the embedded Redis: {exc}", 1)
    except OSError as exc:
        if exc.filename is None:
            raise  # not a file the operator named: a bug, keep its traceback
        return _fail(prog, f"{exc.filename}: {exc.strerror or exc}", 1)
    except KeyboardInterrupt:
        return 130


def _fail(prog: str, message: str, status: int) -> int:
    from crawlfleet.redis.connection import redact

    print(f"{prog}: error: {redact(' '.join(message.split()))}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
