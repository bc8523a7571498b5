"""Figures made once and served to everyone: the fleet's jobs, a job's full view and the
nodes are read from Redis at most once per :data:`FRESH_SECONDS` and rendered as JSON
once, whether one client asks or a hundred, by API requests and live streams alike.

A figure older than that is served as it is while the next one is made in the
background (up to :data:`STALE_SECONDS`; older, or forgotten after a change made through
the manager, the ask waits for the new one): once a figure exists, nobody waits for
Redis. A figure is made by one making at a time (single flight): a crowd arriving when
it goes stale costs Redis one read, not one per client. The making runs as a task of
its own, so a client that goes away does not cancel it for the others; a making that
fails fails every waiter, and the next ask tries again.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.responses import Response

__all__ = ["FRESH_SECONDS", "STALE_SECONDS", "Made", "Shared", "single_flight"]

T = TypeVar("T")

#: A figure made within this long is served as it is (the live streams send a round a
#: second: each round's figures are made once).
FRESH_SECONDS = 0.9
#: A figure older than FRESH_SECONDS but younger than this is still served, at once,
#: while the next one is made: asking never waits for Redis once a figure exists.
STALE_SECONDS = 5.0
#: Figures kept at most (the fleet, the nodes, one per job asked for), then start over.
MAX_KEYS = 200


@dataclass(frozen=True)
class Made:
    """A figure, when it was made (monotonic), and its JSON (compact; as text and as
    UTF-8 bytes)."""

    value: Any
    at: float
    text: str
    body: bytes

    def response(self) -> Response:
        """The figure as an API answer (its JSON as made, not rendered again)."""
        return Response(self.body, media_type="application/json")


def single_flight(
    running: dict[str, asyncio.Task[Any]], key: str, make: Callable[[], Awaitable[T]]
) -> asyncio.Task[T]:
    """The task that makes *key*'s value: the one in *running*, else a new one running
    *make* (in *running* until it ends; a caller may drop it from there sooner, e.g. to
    have the next ask start anew). A task of its own, so a caller that goes away does
    not cancel it for the others (await it through ``asyncio.shield``); a failure
    nobody waits for any more is not an "exception never retrieved"."""
    task: asyncio.Task[T] | None = running.get(key)
    if task is None:

        async def run() -> T:
            try:
                return await make()
            finally:
                if running.get(key) is task:
                    del running[key]

        task = asyncio.get_running_loop().create_task(run())
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        running[key] = task
    return task


class Shared:
    """See the module docstring."""

    def __init__(
        self,
        fresh_seconds: float = FRESH_SECONDS,
        stale_seconds: float = STALE_SECONDS,
        max_keys: int = MAX_KEYS,
    ) -> None:
        self.fresh_seconds = fresh_seconds
        self.stale_seconds = stale_seconds
        self.max_keys = max_keys
        self._made: dict[str, Made] = {}
        self._making: dict[str, asyncio.Task[Made]] = {}
        #: how many times a figure was made (for the benchmark and the tests)
        self.makings = 0

    async def get(self, key: str, make: Callable[[], Awaitable[Any]]) -> Made:
        """*key*'s figure: the one made within :attr:`fresh_seconds`, the one being made,
        or made now by *make*."""
        made = self._made.get(key)
        age = time.monotonic() - made.at if made is not None else None
        if made is not None and age is not None and age < self.fresh_seconds:
            return made
        task = single_flight(self._making, key, lambda: self._make(key, make))
        if made is not None and age is not None and age < self.stale_seconds:
            return made  # the next one is on its way: nobody waits for Redis
        return await asyncio.shield(task)

    async def _make(self, key: str, make: Callable[[], Awaitable[Any]]) -> Made:
        value = await make()
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        made = Made(value, time.monotonic(), text, text.encode())
        self.makings += 1
        if len(self._made) >= self.max_keys and key not in self._made:
            self._made.clear()
        self._made[key] = made
        return made

    def peek(self, key: str) -> Made | None:
        """*key*'s figure if :meth:`get` would serve it at once (made within
        :attr:`stale_seconds`), else None; nothing is made."""
        made = self._made.get(key)
        if made is None or time.monotonic() - made.at >= self.stale_seconds:
            return None
        return made

    def making(self) -> list[asyncio.Task[Made]]:
        """The figures being made now (the manager cancels them when it stops)."""
        return list(self._making.values())

    def forget(self, key: str | None = None) -> None:
        """Make *key* (or every figure) again at the next ask: after a change made
        through the manager, its answer shows the change at once."""
        if key is None:
            self._made.clear()
        else:
            self._made.pop(key, None)
