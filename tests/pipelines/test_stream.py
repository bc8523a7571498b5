"""Redis stream store specifics: entry format, settings, the pipeline on the shared
client, trimming, and a real Redis that is killed and restarted."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy.utils.test import get_crawler

from crawlfleet.exceptions import ConfigError, MalformedEntry
from crawlfleet.parts import parts_of
from crawlfleet.pipelines.buffered import StoreOptions
from crawlfleet.pipelines.key import make_key
from crawlfleet.pipelines.sinks import StoredItem
from crawlfleet.pipelines.sql import SqlSink
from crawlfleet.pipelines.stream import (
    RedisStreamPipeline,
    RedisStreamSink,
    decode_entry,
    encode_entry,
)
from crawlfleet.redis.keys import JobKeys, jobs_key
from crawlfleet.redis.localcluster import RedisProcess

ROOT = Path(__file__).resolve().parents[2]

FAST = StoreOptions(
    batch_items=10,
    batch_seconds=0.02,
    buffer_items=1000,
    retry_min_seconds=0.05,
    retry_max_seconds=0.2,
    close_timeout_seconds=10.0,
)


def _record(i: int, version: int = 1, url: str | None = "https://example.com/") -> StoredItem:
    return StoredItem(
        f"key{i:04d}", "job-s", "product", url and f"{url}{i}", {"n": i, "v": version, "t": "é中"}
    )


# --- entry format ------------------------------------------------------------------------


def test_entry_round_trip_keeps_every_field() -> None:
    record = _record(7)
    fields = encode_entry(record)
    assert fields[b"v"] == b"1"
    assert (fields[b"key"], fields[b"job"], fields[b"type"]) == (b"key0007", b"job-s", b"product")
    assert fields[b"url"] == b"https://example.com/7"
    assert json.loads(fields[b"doc"]) == {"n": 7, "v": 1, "t": "é中"}
    assert decode_entry(fields) == record
    no_url = _record(8, url=None)
    assert b"url" not in encode_entry(no_url)
    assert decode_entry(encode_entry(no_url)) == no_url


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({b"v": b"2"}, "entry version b'2', expected 1"),
        ({b"v": None}, "entry version missing"),
        ({b"key": None}, "entry without key"),
        ({b"doc": b"{not json"}, "entry doc is not JSON"),
        ({b"doc": b"[1, 2]"}, "entry doc is a JSON list, not an object"),
        ({b"job": b"\xff\xfe"}, "entry is not UTF-8"),
        ({b"v": b"\x80\x04\x95pickle"}, "entry version"),
    ],
)
def test_malformed_entries_are_refused_with_the_reason(
    change: dict[bytes, bytes | None], message: str
) -> None:
    fields: dict[bytes, bytes] = encode_entry(_record(1))
    for name, value in change.items():
        if value is None:
            fields.pop(name)
        else:
            fields[name] = value
    with pytest.raises(MalformedEntry, match=message.replace("[", r"\[").replace("(", r"\(")):
        decode_entry(fields)


# --- settings ----------------------------------------------------------------------------


def test_pipeline_settings_and_keys(redis_server_url: str, key_prefix: str) -> None:
    crawler = get_crawler(
        settings_dict={
            "CRAWLFLEET_REDIS_URL": redis_server_url,
            "CRAWLFLEET_KEY_PREFIX": key_prefix,
            "CRAWLFLEET_JOB": "shop",
            "CRAWLFLEET_ITEMS_STREAM_MAXLEN": 5000,
        }
    )
    pipeline = RedisStreamPipeline.from_crawler(crawler)
    sink = pipeline.sink
    assert isinstance(sink, RedisStreamSink)
    assert (sink.url, sink.prefix, sink.maxlen) == (redis_server_url, key_prefix, 5000)
    assert sink.options.batch_items == 500
    keys = JobKeys.of(key_prefix, "shop")
    assert keys.items == f"{key_prefix}:{{shop}}:items"
    assert keys.items_dead == f"{key_prefix}:{{shop}}:items:dead"
    assert keys.items not in keys.fixed()  # a job reset keeps items not yet stored


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"CRAWLFLEET_ITEMS_STREAM_MAXLEN": -1}, "CRAWLFLEET_ITEMS_STREAM_MAXLEN must be >= 0"),
        ({"CRAWLFLEET_ITEMS_STREAM_MAXLEN": "many"}, "CRAWLFLEET_ITEMS_STREAM_MAXLEN must be an"),
        ({"CRAWLFLEET_JOB": "a {b}"}, "CRAWLFLEET_JOB"),
        ({"CRAWLFLEET_REDIS_URL": "http://x"}, "CRAWLFLEET_REDIS_URL"),
        ({"CRAWLFLEET_STORE_BATCH_ITEMS": 0}, "CRAWLFLEET_STORE_BATCH_ITEMS"),
    ],
)
def test_wrong_settings_stop_start_up_naming_the_setting(
    redis_server_url: str, settings: dict[str, Any], message: str
) -> None:
    crawler = get_crawler(settings_dict={"CRAWLFLEET_REDIS_URL": redis_server_url, **settings})
    with pytest.raises(ConfigError, match=message):
        RedisStreamPipeline.from_crawler(crawler)


# --- the pipeline on the shared client -----------------------------------------------------


def test_pipeline_appends_items_on_the_shared_client(
    redis_server_url: str, key_prefix: str, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    crawler = get_crawler(
        settings_dict={
            "CRAWLFLEET_REDIS_URL": redis_server_url,
            "CRAWLFLEET_KEY_PREFIX": key_prefix,
            "CRAWLFLEET_JOB": "shop",
            "CRAWLFLEET_DATA_DIR": str(tmp_path),
            "CRAWLFLEET_STORE_BATCH_SECONDS": 0.01,
        }
    )
    pipeline = RedisStreamPipeline.from_crawler(crawler)

    async def crawl() -> None:
        pipeline.open_spider(None)
        for i in range(120):
            item = {"url": f"https://shop.example/p/{i}", "name": f"product {i}", "_html": "x"}
            assert await pipeline.process_item(item) is item
        await pipeline.close_spider(None)
        client = parts_of(crawler).redis
        assert client is not None
        await client.aclose()

    asyncio.run(asyncio.wait_for(crawl(), 30))
    keys = JobKeys.of(key_prefix, "shop")
    entries: Any = sync_redis.xrange(keys.items)
    assert len(entries) == 120
    _, fields = entries[3]
    assert set(fields) == {b"v", b"key", b"job", b"type", b"url", b"doc"}
    record = decode_entry(fields)
    assert (record.job, record.item_type, record.url) == (
        "shop",
        "item",
        "https://shop.example/p/3",
    )
    assert record.document == {"url": "https://shop.example/p/3", "name": "product 3"}
    assert len(record.key) == 40
    assert sync_redis.sismember(jobs_key(key_prefix), "shop")
    assert crawler.stats is not None
    assert crawler.stats.get_value("crawlfleet/store/stream/written") == 120


def test_maxlen_trims_the_stream(redis_server_url: str, key_prefix: str) -> None:
    sink = RedisStreamSink(redis_server_url, prefix=key_prefix, maxlen=100, options=FAST)
    sink.open()

    async def put_all() -> int:
        for i in range(1000):
            await sink.put(_record(i))
        return await sink.close()

    assert asyncio.run(put_all()) == 0
    client = redis.Redis.from_url(redis_server_url)
    try:
        length = client.xlen(JobKeys.of(key_prefix, "job-s").items)
    finally:
        client.close()
    assert 100 <= length < 1000  # approximate trimming: whole nodes of the stream go


# --- Redis down and back -------------------------------------------------------------------


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path / "redis")
    server.start()
    yield server
    server.close()


async def _until_written(sink: RedisStreamSink, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while sink.pending and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert sink.pending == 0


def test_redis_killed_and_restarted_loses_nothing(own_redis: RedisProcess, tmp_path: Path) -> None:
    """On the shared asyncio client, as in a crawl: Redis is killed -9 with items in
    flight; they wait in the buffer and are written once Redis is back."""
    options = StoreOptions(
        batch_items=20,
        batch_seconds=0.01,
        buffer_items=200,
        retry_min_seconds=0.05,
        retry_max_seconds=0.3,
        close_timeout_seconds=10,
        spill_dir=tmp_path / "unwritten",
    )

    async def scenario() -> int:
        from crawlfleet.redis.connection import make_client

        client = make_client(own_redis.url)
        sink = RedisStreamSink(own_redis.url, prefix="cfx", client=client, options=options)
        sink.open()
        try:
            for i in range(50):
                await sink.put(_record(i))
            await _until_written(sink)
            own_redis.kill()
            for i in range(40, 150):
                await sink.put(_record(i, version=2))
            await asyncio.sleep(1.0)
            assert sink.pending == 110, "nothing written, nothing dropped while Redis is down"
            await asyncio.to_thread(own_redis.start)
            await _until_written(sink)
            return await sink.close()
        finally:
            await client.aclose()

    assert asyncio.run(asyncio.wait_for(scenario(), 40)) == 0
    reader = RedisStreamSink(own_redis.url, prefix="cfx")
    assert reader.count() == 150
    stored = reader.get("key0045")
    assert stored is not None and stored.document["v"] == 2
    assert list((tmp_path / "unwritten").glob("*.jsonl")) == []


# --- a real crawl, then a worker ------------------------------------------------------------

SPIDER = """
import json
import scrapy

class StreamSpider(scrapy.Spider):
    name = "streamer"
    custom_settings = json.loads({settings!r})

    async def start(self):
        for i in range(300):
            yield {{"_type": "row", "url": f"https://rows.example/{{i}}", "n": i}}
"""


def test_crawl_streams_items_and_a_worker_stores_them(
    redis_server_url: str, key_prefix: str, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    """The pipeline on Scrapy's own reactor loop (shared client opened there), then
    ``items work --until-empty`` into SQLite."""
    settings = {
        "ITEM_PIPELINES": {
            "crawlfleet.pipelines.key.KeyPipeline": 700,
            "crawlfleet.pipelines.stream.RedisStreamPipeline": 820,
        },
        "CRAWLFLEET_REDIS_URL": redis_server_url,
        "CRAWLFLEET_KEY_PREFIX": key_prefix,
        "CRAWLFLEET_DATA_DIR": str(tmp_path / "data"),
        "CRAWLFLEET_STORE_BATCH_ITEMS": 100,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
    }
    spider = tmp_path / "stream_spider.py"
    spider.write_text(SPIDER.format(settings=json.dumps(settings)), encoding="utf-8")
    crawl = subprocess.run(
        [sys.executable, "-W", "default", "-m", "scrapy", "runspider", str(spider)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert crawl.returncode == 0, crawl.stderr[-3000:]
    assert "Traceback" not in crawl.stderr, crawl.stderr[-3000:]
    assert "'crawlfleet/store/stream/written': 300" in crawl.stderr
    keys = JobKeys.of(key_prefix, "streamer")
    assert sync_redis.xlen(keys.items) == 300

    db = tmp_path / "items.sqlite3"
    work = subprocess.run(
        [sys.executable, "-m", "tests.support.items_command", "work", "streamer",
         "--to", f"sqlite:///{db}", "--until-empty", "--redis-url", redis_server_url,
         "-s", f"CRAWLFLEET_KEY_PREFIX={key_prefix}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert work.returncode == 0, work.stderr[-3000:]
    assert "300 read (0 claimed), 300 stored, 0 dead-lettered, 0 left pending" in " ".join(
        work.stderr.split()
    )
    store = SqlSink(f"sqlite:///{db}")
    assert store.count() == 300
    row = store.get(make_key("row", ["https://rows.example/7"]))
    assert row is not None
    assert (row.job, row.item_type, row.document) == (
        "streamer",
        "row",
        {"url": "https://rows.example/7", "n": 7},
    )
    assert sync_redis.xlen(keys.items) == 0
