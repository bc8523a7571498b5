"""``--watch``: refresh a command's view until Ctrl-C, riding out Redis outages."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from rich.console import Console, RenderableType
from rich.live import Live
from rich.markup import escape

from crawlfleet.cli.options import redis_problem
from crawlfleet.outage import Outage
from crawlfleet.redis.connection import REDIS_ERRORS

__all__ = ["watch"]

T = TypeVar("T")


async def watch(
    console: Console,
    *,
    interval: float,
    count: int,
    as_json: bool,
    collect: Callable[[], Awaitable[T]],
    render: Callable[[T], RenderableType],
    document: Callable[[T], Any],
) -> int:
    """Collect and show every *interval* seconds until *count* refreshes (0: until
    Ctrl-C). On a terminal one screen is redrawn; piped, each refresh is printed under a
    time rule, or with *as_json* as one JSON document a line. A Redis outage is said
    (piped: once on stderr when it starts, once when it ends, with its length from the
    start of the refresh that failed or hung) and watched through.

    Returns 1 if Redis did not answer the last refresh, else 0."""
    live = (
        Live(console=console, auto_refresh=False) if console.is_terminal and not as_json else None
    )
    # on a terminal the screen shows the outage at every refresh; piped, its start and end
    outage = Outage(
        "Redis",
        every=None,
        clock=time.time,  # its start is shown as a time of day
        say_down=(lambda exc: None) if live else _said_down,
        say_back=(lambda seconds: None) if live else _said_back,
    )
    refreshes = 0
    if live:
        live.start()
    try:
        while True:
            began = time.time()  # an outage counts from the refresh that failed or hung
            try:
                view = await collect()
            except REDIS_ERRORS as exc:  # keep watching: say so, try again
                outage.failed(exc, began)
                if live and outage.since is not None:
                    live.update(
                        f"[red]{escape(redis_problem(exc))}[/]\n"
                        f"since {_clock(outage.since)} ({time.time() - outage.since:.0f} s); "
                        f"retrying every {interval:g} s (Ctrl-C to stop)",
                        refresh=True,
                    )
            else:
                outage.succeeded()
                if live:
                    live.update(render(view), refresh=True)
                elif as_json:
                    print(json.dumps(document(view), sort_keys=True, default=str), flush=True)
                else:
                    console.rule(_clock(time.time()))
                    console.print(render(view))
            refreshes += 1
            if count and refreshes >= count:
                return 0 if outage.since is None else 1
            await asyncio.sleep(interval)
    finally:
        if live:
            live.stop()


def _said_down(exc: BaseException) -> None:
    _note(f"{redis_problem(exc)}; still watching")


def _said_back(seconds: float) -> None:
    _note(f"Redis reachable again after {seconds:.0f} s")


def _note(text: str) -> None:
    print(f"{_clock(time.time())} {text}", file=sys.stderr, flush=True)


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))
