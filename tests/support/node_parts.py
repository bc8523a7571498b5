"""A node's scheduler with no Scrapy engine and no process: a stand-in for what the
scheduler sees of the engine, a scheduler of job "job" on any frontier (the in-memory
one by default) with quick timings, and the awaits a test plays the engine with."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from scrapy import Request
from scrapy.utils.request import RequestFingerprinter

from crawlfleet.frontier.base import FrontierBackend
from crawlfleet.frontier.config import FrontierConfig
from crawlfleet.frontier.memory import MemoryFrontier
from crawlfleet.node.engine import EngineHooks
from crawlfleet.node.scheduler import Scheduler
from crawlfleet.redis.config import RedisConfig
from crawlfleet.settings.config import settings_with_defaults

__all__ = ["FAST", "Engine", "node", "node_on", "run", "take", "until"]

#: Timings of a node under test: flushes, heartbeats, reclaims and grace in tenths of a
#: second, leases of 2 s.
FAST = {
    "CRAWLFLEET_FLUSH_SECONDS": 0.01,
    "CRAWLFLEET_HEARTBEAT_SECONDS": 0.1,
    "CRAWLFLEET_LEASE_SECONDS": 2,
    "CRAWLFLEET_NODE_TIMEOUT_SECONDS": 0.3,
    "CRAWLFLEET_RECLAIM_SECONDS": 0.1,
    "CRAWLFLEET_FINISH_GRACE_SECONDS": 0.1,
    "CRAWLFLEET_IDLE_MAX_SECONDS": 0.1,
}


class Engine:
    """What a scheduler sees of Scrapy's engine: requests in progress, wake-ups."""

    def __init__(self) -> None:
        self.inprogress: set[Request] = set()
        self.dropped: list[Request] = []
        self.closed: list[str] = []
        self.wakes = 0

    def wake(self) -> None:
        self.wakes += 1

    def hooks(self) -> EngineHooks:
        return EngineHooks(
            inprogress=lambda: self.inprogress,
            wake=self.wake,
            dropped=self.dropped.append,
            close=self.closed.append,
        )


def node(
    store: dict[str, Any], engine: Engine, settings: dict[str, Any] | None = None
) -> Scheduler:
    """A node of job "job" on the in-memory frontier *store*."""
    return node_on(MemoryFrontier("job", store), engine, settings)


def node_on(
    frontier: FrontierBackend, engine: Engine, settings: dict[str, Any] | None = None
) -> Scheduler:
    """A node of job "job" on *frontier*, with FAST and *settings*, bound to *engine*."""
    s = settings_with_defaults({**FAST, **(settings or {})})
    scheduler = Scheduler(
        config=FrontierConfig.from_settings(s, "job"),
        redis_config=RedisConfig.from_settings(s),
        fingerprint=RequestFingerprinter().fingerprint,
        frontier=frontier,
    )
    scheduler.bind_engine(engine.hooks(), [])
    return scheduler


async def until(check: Callable[[], bool], seconds: float = 3.0) -> None:
    """Await until *check* is true; fail after *seconds*."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def take(scheduler: Scheduler, engine: Engine, n: int) -> list[Request]:
    """The next *n* requests, handed to the engine (in progress)."""
    got: list[Request] = []

    def more() -> bool:
        request = scheduler.next_request()
        if request is not None:
            engine.inprogress.add(request)
            got.append(request)
        return len(got) >= n

    await until(more)
    return got


def run(body: Callable[[], Awaitable[None]], seconds: float = 20) -> None:
    """Run the coroutine *body* makes, failing after *seconds*."""
    asyncio.run(asyncio.wait_for(body(), seconds))
