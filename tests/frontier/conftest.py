"""The frontier backends every contract test runs on: ``run`` (the Redis frontier in
each seen-filter mode, the in-memory one, a job of five shards) and ``run_redis``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.memory import MemoryFrontier
from crawlfleet.frontier.records import SeenConfig
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys

T = TypeVar("T")


def _runner(mode: str, redis_url: str, key_prefix: str) -> Callable[..., Any]:
    def runner(fn: Callable[[Any], Awaitable[T]], job: str = "job1", **options: Any) -> T:
        """``await fn(frontier)``, the frontier built with *options* (keyword arguments
        every frontier takes, e.g. changes_maxlen)."""

        async def main() -> T:
            if mode == "memory":
                return await fn(MemoryFrontier(job, **options))
            client = make_client(redis_url)
            try:
                if mode == "sharded":  # five shards on one Redis, Bloom mode (site
                    # "a" is in shard 2; the tests' other sites in shards 0 to 3)
                    seen = SeenConfig("bloom", bloom_capacity=5000, bloom_error_rate=1e-4)
                    keys = JobKeys.of(key_prefix, job)
                    return await fn(JobFrontier(client, keys, seen, shards=5, **options))
                seen = SeenConfig(mode, bloom_capacity=1000, bloom_error_rate=1e-4)
                return await fn(Frontier(client, JobKeys.of(key_prefix, job), seen, **options))
            finally:
                await client.aclose()

        return asyncio.run(main())

    return runner


@pytest.fixture(params=["exact", "bloom", "memory", "sharded"])
def run(request: Any, redis_server_url: str, key_prefix: str) -> Callable[..., Any]:
    """run(fn) runs ``await fn(frontier)`` on a fresh job: the contract every frontier
    keeps, on Redis in each seen-filter mode, on the in-memory frontier, and on a job
    of five shards."""
    return _runner(request.param, redis_server_url, key_prefix)


@pytest.fixture(params=["exact", "bloom"])
def run_redis(request: Any, redis_server_url: str, key_prefix: str) -> Callable[..., Any]:
    """As ``run``, on Redis only: for what looks at Redis's keys."""
    return _runner(request.param, redis_server_url, key_prefix)
