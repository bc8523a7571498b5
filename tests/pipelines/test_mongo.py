"""MongoDB store specifics: settings, error classes, and (with a server) the pipeline.

No MongoDB server is installed on the usual test machines: the tests that need one run
against CRAWLFLEET_TEST_MONGODB_URL and skip without it, saying so. The contract tests
(``test_sink_contract.py``) run against the same server.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import errors as mongo_errors
from scrapy.utils.test import get_crawler

from crawlfleet.exceptions import ConfigError
from crawlfleet.pipelines.buffered import StoreOptions
from crawlfleet.pipelines.mongo import MongoSink, MongoStorePipeline
from crawlfleet.pipelines.stream import RedisStreamSink
from crawlfleet.pipelines.worker_options import WorkerOptions
from crawlfleet.pipelines.workers import ItemWorker
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from tests.support.databases import require_mongodb, unique_table
from tests.support.item_stream import JOB, produce, stored_item

# --- without a server ----------------------------------------------------------------------


def test_from_crawler_reads_url_database_and_collection() -> None:
    pipeline = MongoStorePipeline.from_crawler(get_crawler())
    sink = pipeline.sink
    assert isinstance(sink, MongoSink)
    assert sink.url == "mongodb://127.0.0.1:27017"
    assert (sink.database, sink.collection_name) == ("crawlfleet", "crawlfleet_items")
    assert sink.options.batch_items == 500

    named = MongoSink("mongodb://u:secret@db1:27017,db2:27017/shop?replicaSet=rs0")
    assert named.database == "shop"
    assert "secret" not in named.target and "secret" not in named.spill_id
    assert named.target == "mongodb mongodb://u:***@db1:27017,db2:27017/shop?replicaSet=rs0 " \
        "collection shop.crawlfleet_items"  # fmt: skip
    assert MongoSink("mongodb+srv://cluster.example.net/").database == "crawlfleet"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"CRAWLFLEET_MONGODB_URL": "http://db:27017"}, "CRAWLFLEET_MONGODB_URL must start"),
        ({"CRAWLFLEET_MONGODB_URL": "mongodb://db:notaport"}, "CRAWLFLEET_MONGODB_URL"),
        ({"CRAWLFLEET_MONGODB_DATABASE": "a.b"}, "CRAWLFLEET_MONGODB_DATABASE"),
        ({"CRAWLFLEET_MONGODB_COLLECTION": "system.users"}, "CRAWLFLEET_MONGODB_COLLECTION"),
        ({"CRAWLFLEET_MONGODB_COLLECTION": "a$b"}, "CRAWLFLEET_MONGODB_COLLECTION"),
        ({"CRAWLFLEET_MONGODB_COLLECTION": 5}, "CRAWLFLEET_MONGODB_COLLECTION must be a string"),
    ],
)
def test_wrong_settings_stop_start_up_naming_the_setting(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        MongoStorePipeline.from_crawler(get_crawler(settings_dict=settings))


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (mongo_errors.AutoReconnect("connection reset"), True),
        (mongo_errors.ServerSelectionTimeoutError("no servers"), True),
        (mongo_errors.NetworkTimeout("timed out"), True),
        (mongo_errors.ExecutionTimeout("too slow", code=50), True),
        (mongo_errors.OperationFailure("stepped down", code=189), True),
        (mongo_errors.OperationFailure("bad field name", code=52), False),
        (mongo_errors.BulkWriteError({"writeErrors": [{"code": 11000}]}), True),
        (mongo_errors.BulkWriteError({"writeErrors": [{"code": 2}, {"code": 11000}]}), False),
        (mongo_errors.BulkWriteError({"writeErrors": [], "writeConcernErrors": [{}]}), True),
        (mongo_errors.DocumentTooLarge("too large"), False),
        (ValueError("x"), False),
    ],
)
def test_transient_errors_are_retried_refused_data_is_not(
    exc: BaseException, transient: bool
) -> None:
    assert MongoSink("mongodb://127.0.0.1:27017").is_transient(exc) is transient


def test_unreachable_server_is_retried_then_spilled(tmp_path: Path) -> None:
    """A port where no MongoDB listens: a store that is down, with the real driver."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    stats = get_crawler().stats
    options = StoreOptions(
        batch_items=10,
        batch_seconds=0.01,
        retry_min_seconds=0.05,
        retry_max_seconds=0.1,
        close_timeout_seconds=1.0,
        spill_dir=tmp_path,
    )
    fast = {"serverSelectionTimeoutMS": 100, "connectTimeoutMS": 100}
    sink = MongoSink(
        f"mongodb://127.0.0.1:{port}", options=options, stats=stats, client_options=fast
    )
    sink.open()

    async def put_and_close() -> int:
        for i in range(5):
            await sink.put(stored_item(i))
        return await sink.close()

    assert asyncio.run(put_and_close()) == 5
    assert stats is not None and (stats.get_value("crawlfleet/store/mongodb/retries") or 0) >= 1
    (spilled,) = tmp_path.glob("mongodb-crawlfleet-crawlfleet_items-*.jsonl")
    assert len(spilled.read_text().splitlines()) == 5


# --- with a server ---------------------------------------------------------------------------


@pytest.fixture
def mongo_sink() -> Iterator[MongoSink]:
    sink = MongoSink(require_mongodb(), collection=unique_table())
    yield sink
    sink.drop_collection()


def test_store_pipeline_writes_items(mongo_sink: MongoSink) -> None:
    crawler = get_crawler(
        settings_dict={
            "CRAWLFLEET_MONGODB_URL": mongo_sink.url,
            "CRAWLFLEET_MONGODB_DATABASE": mongo_sink.database,
            "CRAWLFLEET_MONGODB_COLLECTION": mongo_sink.collection_name,
            "CRAWLFLEET_JOB": "shop",
        }
    )
    pipeline = MongoStorePipeline.from_crawler(crawler)

    async def crawl() -> None:
        pipeline.open_spider(None)
        for i in range(30):
            await pipeline.process_item({"url": f"https://shop.example/{i}", "n": i, "_x": 1})
        await pipeline.close_spider(None)

    asyncio.run(asyncio.wait_for(crawl(), 30))
    assert mongo_sink.count() == 30
    key = pipeline.record({"url": "https://shop.example/3"}).key
    stored = mongo_sink.get(key)
    assert stored is not None
    assert (stored.job, stored.item_type, stored.url) == ("shop", "item", "https://shop.example/3")
    assert stored.document == {"url": "https://shop.example/3", "n": 3}


def test_worker_moves_stream_items_into_mongodb(
    mongo_sink: MongoSink, redis_server_url: str, key_prefix: str
) -> None:
    produce(redis_server_url, key_prefix, [stored_item(i) for i in range(120)])
    produce(redis_server_url, key_prefix, [stored_item(i, version=2) for i in range(20)])

    async def work() -> int:
        client = make_client(redis_server_url)
        try:
            options = WorkerOptions(until_empty=True, consumer="m1", batch_items=50)
            report = await ItemWorker(
                client, JobKeys.of(key_prefix, JOB), mongo_sink, options
            ).run()
            return report.acknowledged
        finally:
            await client.aclose()

    assert asyncio.run(asyncio.wait_for(work(), 30)) == 140
    assert mongo_sink.count() == 120
    stored = mongo_sink.get("key00003")
    assert stored is not None and stored.document["v"] == 2
    assert RedisStreamSink(redis_server_url, prefix=key_prefix).count() == 0
