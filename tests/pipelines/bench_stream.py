"""Throughput of the Redis item stream and of an item worker (bounded; not a test).

    .venv/bin/python -m tests.pipelines.bench_stream [--items N] [--redis-url URL]

1. ``RedisStreamPipeline`` on the shared asyncio client, as in a crawl: items of about
   1 KB through ``process_item`` until ``close_spider`` has written them all;
2. the stream sink alone (records already built, its own client);
3. one ``ItemWorker`` moving the stream into SQLite, and into PostgreSQL when one
   answers (see ``tests/support/databases.py``).

Keys live under a prefix of their own, deleted at the end; tables are dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis
from scrapy.utils.test import get_crawler

from crawlfleet.parts import parts_of
from crawlfleet.pipelines.buffered import BufferedSink, StoreOptions
from crawlfleet.pipelines.sinks import StoredItem
from crawlfleet.pipelines.sql import SqlSink
from crawlfleet.pipelines.stream import RedisStreamPipeline, RedisStreamSink
from crawlfleet.pipelines.worker_options import WorkerOptions
from crawlfleet.pipelines.workers import ItemWorker
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from tests.support.databases import postgres_url, unique_table

TIMEOUT_SECONDS = 120.0


def _item(i: int) -> dict[str, Any]:
    return {
        "url": f"https://shop.example/p/{i}",
        "name": f"Product {i}",
        "price": i % 1000 + 0.99,
        "tags": ["a", "b", "c"],
        "text": ("Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 16)[:900],
    }


async def _pipeline(url: str, prefix: str, job: str, n: int) -> float:
    crawler = get_crawler(
        settings_dict={
            "CRAWLFLEET_REDIS_URL": url,
            "CRAWLFLEET_KEY_PREFIX": prefix,
            "CRAWLFLEET_JOB": job,
        }
    )
    pipeline = RedisStreamPipeline.from_crawler(crawler)
    pipeline.open_spider(None)
    started = time.perf_counter()
    for i in range(n):
        await pipeline.process_item(_item(i))
    await pipeline.close_spider(None)
    elapsed = time.perf_counter() - started
    client = parts_of(crawler).redis
    assert client is not None
    await client.aclose()
    return elapsed


async def _sink(url: str, prefix: str, job: str, n: int) -> float:
    records = [
        StoredItem(f"k{i:08d}", job, "item", f"https://shop.example/p/{i}", _item(i))
        for i in range(n)
    ]
    sink = RedisStreamSink(url, prefix=prefix, options=StoreOptions())
    sink.open()
    started = time.perf_counter()
    for record in records:
        await sink.put(record)
    await sink.close()
    return time.perf_counter() - started


async def _worker(
    url: str, prefix: str, job: str, store: BufferedSink, group: str
) -> tuple[int, float]:
    client = make_client(url)
    try:
        options = WorkerOptions(
            group=group, consumer="bench", until_empty=True, delete_stored=False
        )
        worker = ItemWorker(client, JobKeys.of(prefix, job), store, options)
        started = time.perf_counter()
        report = await worker.run()
        return report.acknowledged, time.perf_counter() - started
    finally:
        await client.aclose()


def _rate(n: int, seconds: float) -> str:
    return f"{n} items in {seconds:.2f} s = {n / seconds:,.0f} items/s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    n, url = args.items, args.redis_url
    prefix = f"cfbench{uuid.uuid4().hex[:8]}"

    def run(coro: Any) -> Any:
        return asyncio.run(asyncio.wait_for(coro, TIMEOUT_SECONDS))

    try:
        print("pipeline -> stream:", _rate(n, run(_pipeline(url, prefix, "bench-p", n))))
        print("sink alone -> stream:", _rate(n, run(_sink(url, prefix, "bench-s", n))))
        with tempfile.TemporaryDirectory() as tmp:
            stores: list[tuple[str, SqlSink]] = [
                ("sqlite", SqlSink(f"sqlite:///{Path(tmp) / 'items.db'}", table=unique_table()))
            ]
            pg, _ = postgres_url()
            if pg:
                stores.append(("postgresql", SqlSink(pg, table=unique_table())))
            for i, (label, store) in enumerate(stores):
                try:
                    moved, seconds = run(_worker(url, prefix, "bench-p", store, f"bench{i}"))
                    print(f"worker stream -> {label}:", _rate(moved, seconds))
                finally:
                    store.drop_table()
    finally:
        client = redis.Redis.from_url(url)
        try:
            doomed = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            if doomed:
                client.delete(*doomed)
        finally:
            client.close()


if __name__ == "__main__":
    main()
