"""Items on a job's Redis stream, for the tests of item workers and stores: numbered
stored items of job :data:`JOB`, and the stream filled with them through the stream
sink, as nodes fill it."""

from __future__ import annotations

import asyncio

from crawlfleet.pipelines.buffered import StoreOptions
from crawlfleet.pipelines.sinks import Record, StoredItem
from crawlfleet.pipelines.stream import RedisStreamSink

__all__ = ["JOB", "produce", "stored_item"]

#: The job whose stream the items go to.
JOB = "job-w"


def stored_item(i: int, version: int = 1, key: str | None = None) -> StoredItem:
    """Item number *i* of :data:`JOB` (key ``key<i>`` unless *key*), its fields the
    number and *version*."""
    return StoredItem(
        key or f"key{i:05d}", JOB, "product", f"https://shop.example/{i}", {"n": i, "v": version}
    )


def produce(redis_url: str, prefix: str, records: list[Record]) -> None:
    """Append *records* (items, marks) to the job's stream through the stream sink."""
    options = StoreOptions(batch_items=500, batch_seconds=0.01, buffer_items=5000)
    sink = RedisStreamSink(redis_url, prefix=prefix, options=options)
    sink.open()

    async def put_all() -> int:
        for record in records:
            await sink.put(record)
        return await sink.close()

    assert asyncio.run(put_all()) == 0
