"""A node says which item stores it writes to (``item_stores`` in its heartbeat's
status), never with a password: the manager compares them with the stores it reads."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from scrapy.utils.test import get_crawler

from crawlfleet.parts import parts_of
from crawlfleet.pipelines.browse import SqlItemReader, stream_identity
from crawlfleet.pipelines.sql import SqlStorePipeline
from crawlfleet.pipelines.stream import RedisStreamSink, redis_identity


def published(crawler: Any) -> dict[str, Any]:
    status: dict[str, Any] = {}
    for provider in parts_of(crawler).status_providers:
        status.update(provider())
    return status


def test_a_node_publishes_its_sql_store_without_a_password(tmp_path: Path) -> None:
    url = "postgresql+psycopg://crawler:s3cret-pw@db.example:5433/items"
    crawler = get_crawler(settings_dict={"CRAWLFLEET_SQL_URL": url, "CRAWLFLEET_SQL_TABLE": "t1"})
    SqlStorePipeline.from_crawler(crawler)
    status = published(crawler)
    assert status["item_stores"] == [
        {"store": "sql", "database": "postgresql://db.example:5433/items", "table": "t1"}
    ]
    assert "s3cret" not in repr(status) and "crawler" not in repr(status["item_stores"])
    reader = SqlItemReader(url, table="t1", data_dir=tmp_path)
    assert reader.identity == status["item_stores"][0]  # what the manager compares


def test_a_sqlite_store_is_its_absolute_file(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    crawler = get_crawler(settings_dict={"CRAWLFLEET_DATA_DIR": "data"})
    SqlStorePipeline.from_crawler(crawler)
    (store,) = published(crawler)["item_stores"]
    where = f"sqlite:///{tmp_path / 'data' / 'items.sqlite3'} on {socket.gethostname()}"
    assert store == {"store": "sql", "database": where, "table": "crawlfleet_items"}
    assert SqlItemReader("", table="crawlfleet_items", data_dir=Path("data")).identity == store


def test_a_stream_store_is_its_redis_database_and_prefix() -> None:
    sink = RedisStreamSink("redis://user:pw@redis.example:6380/2", prefix="cf")
    assert sink.identity() == {
        "store": "stream",
        "redis": "redis://redis.example:6380/2",
        "prefix": "cf",
    }
    assert sink.identity() == stream_identity("redis://redis.example:6380/2", "cf")
    assert redis_identity("redis://127.0.0.1") == redis_identity("redis://127.0.0.1:6379/0")
    assert redis_identity("unix:///run/r.sock?db=1") == "unix:///run/r.sock?db=1"


def test_a_mongodb_store_is_its_hosts_and_collection() -> None:
    from crawlfleet.pipelines.mongo import MongoSink

    url = "mongodb://crawler:s3cret@m1.example:27017,m2.example/shop?tls=true&authSource=admin"
    sink = MongoSink(url, collection="items")
    assert sink.identity() == {
        "store": "mongodb",
        "server": "mongodb://m1.example:27017,m2.example",
        "collection": "shop.items",
    }
