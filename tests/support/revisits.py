"""What a continuous job holds in Redis, read for tests: its counters (through the
frontier's API) and its revisit schedule (the tracked pages waiting for their next
visit, each with its due time).

:func:`waiting_revisits` is the one place that reads the frontier's keys themselves
(there is no public API for a job's whole schedule): where the waiting revisits live
changes there, and nowhere else.
"""

from __future__ import annotations

import asyncio
from typing import Any

from crawlfleet.frontier.records import split_entry
from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.redis.replies import text
from crawlfleet.testsite.spider import TestSiteSpider

__all__ = ["job_counters", "revisit_settings", "waiting_revisits"]


def revisit_settings(node_env: dict[str, str], interval: float) -> dict[str, Any]:
    """The settings of a node of a continuous job revisiting every page each *interval*
    seconds (fixed), quick to notice a dead node and to queue what came due."""
    return {
        **node_env,
        "CRAWLFLEET_REVISIT": "fixed",
        "CRAWLFLEET_REVISIT_INTERVAL_SECONDS": interval,
        "CRAWLFLEET_REVISIT_MIN_SECONDS": min(0.5, interval),
        "CRAWLFLEET_HEARTBEAT_SECONDS": 0.3,
        "CRAWLFLEET_LEASE_SECONDS": 5,
        "CRAWLFLEET_NODE_TIMEOUT_SECONDS": 1.5,
        "CRAWLFLEET_RECLAIM_SECONDS": 0.3,
        "CONCURRENT_REQUESTS": 4,
        "ROBOTSTXT_OBEY": False,
        "LOG_LEVEL": "INFO",
    }


def job_counters(redis_url: str, prefix: str, job: str) -> dict[str, int]:
    """The counters of *job* (``tracked``, ``revisits``, ``queued``, ``leased``, ...)."""

    async def read() -> dict[str, int]:
        client = make_client(redis_url)
        try:
            return await JobFrontier(client, JobKeys.of(prefix, job)).counters()
        finally:
            await client.aclose()

    return asyncio.run(read())


def waiting_revisits(redis_url: str, prefix: str, job: str) -> dict[str, int]:
    """URL -> due time (ms, Redis's clock) of every request of *job* that waits for a
    later visit (a tracked page between two visits, or a retry waiting out its
    back-off); pages queued or held by a node are not in it. One consistent read
    (MULTI) a shard."""
    codec = RequestCodec(TestSiteSpider(start_urls="http://127.0.0.1/"))

    async def read() -> dict[str, int]:
        client = make_client(redis_url)
        try:
            found: dict[str, int] = {}
            for part in await JobFrontier(client, JobKeys.of(prefix, job)).shards():
                keys = part.keys
                pipe = client.pipeline(transaction=True)
                pipe.zrange(keys.waiting, 0, -1, withscores=True)
                pipe.hgetall(keys.req)
                waiting, entries = await pipe.execute()
                entry: dict[str, Any] = {text(k): v for k, v in entries.items()}
                for rid, due in waiting:
                    url = codec.decode(split_entry(entry[text(rid)])[1]).url
                    assert url not in found, f"{url} waits twice"
                    found[url] = int(due)
            return found
        finally:
            await client.aclose()

    return asyncio.run(read())
