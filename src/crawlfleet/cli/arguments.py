"""How commands declare their arguments: options that take a value in rows, and
NAME=VALUE options (``-s``, ``-a``). Plain argparse and nothing of crawlfleet, so that
any command may use it (the test site's among them, which starts as a process of its
own); the options several commands share are in :mod:`crawlfleet.cli.options`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NamedTuple

from crawlfleet.exceptions import ConfigError

__all__ = ["Option", "add_options", "add_pairs_option", "pairs"]


class Option(NamedTuple):
    """An option that takes a value, declared in one row: its flag, the type of its
    value, its default, its help (which says the default where there is one) and its
    metavar (None: argparse's, the flag in capitals)."""

    flag: str
    type: Callable[[str], Any]
    default: Any
    help: str
    metavar: str | None = None


def add_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, *options: Option
) -> None:
    """Add *options* to *parser* (or to one of its groups), in their order."""
    for option in options:
        parser.add_argument(
            option.flag,
            type=option.type,
            default=option.default,
            help=option.help,
            metavar=option.metavar,
        )


def add_pairs_option(parser: argparse.ArgumentParser, *flags: str, dest: str, help: str) -> None:
    """A NAME=VALUE option that may be given again and again (``-s``, ``-a``); read its
    values with :func:`pairs`."""
    parser.add_argument(
        *flags, dest=dest, action="append", default=[], metavar="NAME=VALUE", help=help
    )


def pairs(items: list[str], flag: str) -> dict[str, str]:
    """The NAME=VALUE *items* of option *flag* as a dict (a name given twice: the last
    value); ConfigError naming *flag* for an item without a name or an ``=``."""
    values = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"{flag} expects NAME=VALUE, got {item!r}")
        values[name] = value
    return values
