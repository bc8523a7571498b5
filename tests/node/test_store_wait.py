"""A node whose item store is down holds a bounded amount of unstored work.

One node on a real Redis frontier, its items going to a real SQLite store that another
connection locks (the store is down). The test plays the engine: it takes requests and
awaits their items' durability as the store pipeline does. Past
``CRAWLFLEET_ITEMS_PENDING_MAX`` waiting items the node leases nothing, hands the
engine nothing, gives back what it held ready and says "waiting for the item store"
in the status that ``crawlfleet status`` shows; once the store is back it goes on.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path

import pytest
from scrapy import Request, Spider

from crawlfleet.cli import status
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.node.backlog import WAITING_FOR_STORE
from crawlfleet.pipelines.buffered import StoreOptions
from crawlfleet.pipelines.sinks import StoredItem
from crawlfleet.pipelines.sql import SqlSink
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from tests.support.cli import parse_command, redis_options
from tests.support.node_parts import Engine, node_on, run, until

BOUND = 5
PAGES = 30


def test_a_node_over_the_bound_leases_nothing_until_the_store_is_back(
    redis_server_url: str,
    key_prefix: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = tmp_path / "items.sqlite3"
    sink = SqlSink(
        f"sqlite:///{path}",
        table="items",
        options=StoreOptions(
            batch_items=10,
            batch_seconds=0.02,
            retry_min_seconds=0.05,
            retry_max_seconds=0.1,
            close_timeout_seconds=5,
        ),
        engine_options={"connect_args": {"timeout": 0.05}},  # a locked file fails fast
    )
    lock = sqlite3.connect(path, timeout=0, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")  # the store is down

    def crawlfleet_status() -> dict[str, object]:
        args = parse_command(status, "job", "--json", *redis_options(redis_server_url, key_prefix))
        assert status.run(args) == 0
        node: dict[str, object] = json.loads(capsys.readouterr().out)["jobs"]["job"]["nodes"]
        return node

    async def body() -> None:
        client = make_client(redis_server_url)
        frontier = JobFrontier(client, JobKeys.of(key_prefix, "job"))
        engine = Engine()
        scheduler = node_on(
            frontier,
            engine,
            {
                "CRAWLFLEET_PREFETCH": 4,
                "CRAWLFLEET_ITEMS_PENDING_MAX": BOUND,
                # a heartbeat late by 0.3 s on a loaded machine (the quick timings' node
                # timeout) made the node dead to its own reclaim, which took back the
                # leases this test counts: liveness is not what it tests
                "CRAWLFLEET_NODE_TIMEOUT_SECONDS": 10,
                "CRAWLFLEET_LEASE_SECONDS": 30,
            },
        )
        scheduler.sync.backlog.stores.append(sink)
        sink.open()
        await scheduler.start(Spider("job"))
        saves: list[asyncio.Task[None]] = []

        async def crawl(request: Request) -> None:
            """What the engine and the store pipeline do with a page: its item is
            awaited until it is durable, and only then is the page done."""
            record = StoredItem(request.url, "job", "page", request.url, {"url": request.url})
            await sink.save(record)
            engine.inprogress.discard(request)

        def engine_step() -> None:
            request = scheduler.next_request()
            if request is not None:
                engine.inprogress.add(request)
                saves.append(asyncio.ensure_future(crawl(request)))

        async def leased() -> int:
            return (await frontier.counters()).get("leased", 0)

        try:
            for i in range(PAGES):
                scheduler.enqueue_request(Request(f"http://a.test/{i}"))

            def step_until_waiting() -> bool:
                engine_step()
                return scheduler.sync.backlog.waiting_for_store

            await until(step_until_waiting, 10)
            assert sink.pending >= BOUND
            await until(lambda: sink.unreachable, 15)  # its first write failed
            # over the bound: nothing handed out, nothing leased, the ready ones given back
            await asyncio.sleep(0.5)
            for _ in range(20):
                engine_step()
            in_progress = len(engine.inprogress)
            assert BOUND <= in_progress <= BOUND + 4, in_progress  # the bound + in flight
            # the ready ones given back in Redis too (a loaded machine's sync loop may take a
            # few rounds to commit that)
            ledger = scheduler.ledger
            deadline = time.monotonic() + 10
            while ledger.ready or ledger.release or await leased() != in_progress:
                assert time.monotonic() < deadline, (ledger.ready, await leased())
                await asyncio.sleep(0.02)
            for _ in range(20):
                engine_step()
            assert len(engine.inprogress) == in_progress  # still nothing handed out
            assert scheduler.sync.leaser.wanted() == 0
            assert scheduler.node_status()["state"] == WAITING_FOR_STORE
            assert scheduler.node_status()["items_waiting"] == in_progress
            # what `crawlfleet status` shows (read from Redis, as published)
            shown = await asyncio.to_thread(crawlfleet_status)
            assert shown[scheduler.node_id]["state"] == WAITING_FOR_STORE  # type: ignore[index]

            lock.execute("ROLLBACK")  # the store is back
            deadline = time.monotonic() + 15
            while len(saves) < PAGES or engine.inprogress:
                assert time.monotonic() < deadline, "the node did not go on"
                engine_step()
                await asyncio.sleep(0.005)
            await asyncio.gather(*saves)
            assert not scheduler.sync.backlog.waiting_for_store
            assert scheduler.node_status()["state"] == "running"
            await scheduler.stop("finished")
        finally:
            await sink.close()
            await client.aclose()

    try:
        with caplog.at_level("INFO", logger="crawlfleet.node.backlog"):
            run(body, 60)  # its own waits add up to 50 s on a loaded machine
    finally:
        lock.close()
    assert sink.count() == PAGES
    said = [r.getMessage() for r in caplog.records if r.name == "crawlfleet.node.backlog"]
    waiting = [m for m in said if "is waiting for the item store" in m]
    assert len(waiting) == 1 and f"(CRAWLFLEET_ITEMS_PENDING_MAX {BOUND})" in waiting[0]
    assert any("takes work again" in m for m in said), said
