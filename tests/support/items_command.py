"""``crawlfleet items ...`` as a subprocess of the worker tests.

Runs the command module exactly as ``crawlfleet`` does, without depending on its
registration in ``cli/main.py``: ``python -m tests.support.items_command work ...``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from crawlfleet.cli import items
from crawlfleet.exceptions import ConfigError


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s [%(name)s] %(levelname)s: %(message)s"
    )
    parser = argparse.ArgumentParser(prog="crawlfleet items")
    items.add_arguments(parser)
    try:
        return items.run(parser.parse_args(argv))
    except ConfigError as exc:  # as crawlfleet.cli.main reports it
        print(f"crawlfleet items: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
