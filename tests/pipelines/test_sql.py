"""SQL store specifics: settings, the store pipeline, refused records, lost connections."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from scrapy import Spider
from scrapy.utils.test import get_crawler

from crawlfleet.exceptions import ConfigError
from crawlfleet.pipelines.buffered import StoreOptions
from crawlfleet.pipelines.key import make_key
from crawlfleet.pipelines.sinks import ItemMark, StoredItem, to_document
from crawlfleet.pipelines.sql import SqlSink, SqlStorePipeline
from tests.support.databases import require_server, unique_table
from tests.support.waiting import poll

FAST = StoreOptions(
    batch_items=20, batch_seconds=0.02, retry_min_seconds=0.05, retry_max_seconds=0.2
)


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def sql_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'items.sqlite3'}"
    return require_server(request.param)


@pytest.fixture
def table(sql_url: str) -> Iterator[str]:
    name = unique_table()
    yield name
    SqlSink(sql_url, table=name).drop_table()


def _record(key: str, **document: Any) -> StoredItem:
    return StoredItem(key, "job", "item", None, document or {"v": 1})


# --- settings --------------------------------------------------------------------------


def test_from_crawler_defaults_to_sqlite_under_the_data_dir(tmp_path: Path) -> None:
    crawler = get_crawler(settings_dict={"CRAWLFLEET_DATA_DIR": str(tmp_path / "data")})
    pipeline = SqlStorePipeline.from_crawler(crawler)
    sink = pipeline.sink
    assert isinstance(sink, SqlSink)
    assert sink.url.database == str(tmp_path / "data" / "items.sqlite3")
    assert sink.table.name == "crawlfleet_items"
    assert sink.options.batch_items == 500
    assert sink.options.spill_dir == tmp_path / "data" / "unwritten"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"CRAWLFLEET_SQL_URL": "not a url"}, "CRAWLFLEET_SQL_URL is not a database URL"),
        ({"CRAWLFLEET_SQL_URL": "oracle://u@h/db"}, "'oracle' is not supported"),
        ({"CRAWLFLEET_SQL_URL": "postgresql+nodriver://u@h/db"}, "CRAWLFLEET_SQL_URL"),
        ({"CRAWLFLEET_SQL_TABLE": "items; drop"}, "CRAWLFLEET_SQL_TABLE"),
        ({"CRAWLFLEET_STORE_BATCH_ITEMS": 0}, "CRAWLFLEET_STORE_BATCH_ITEMS must be >= 1"),
        ({"CRAWLFLEET_STORE_BUFFER_ITEMS": 10}, "CRAWLFLEET_STORE_BUFFER_ITEMS must be >= 500"),
        (
            {"CRAWLFLEET_STORE_RETRY_MIN_SECONDS": 5, "CRAWLFLEET_STORE_RETRY_MAX_SECONDS": 1},
            "CRAWLFLEET_STORE_RETRY_MAX_SECONDS",
        ),
        ({"CRAWLFLEET_STORE_BATCH_SECONDS": "soon"}, "CRAWLFLEET_STORE_BATCH_SECONDS must be a"),
    ],
)
def test_wrong_settings_stop_start_up_naming_the_setting(
    tmp_path: Path, settings: dict[str, Any], message: str
) -> None:
    crawler = get_crawler(settings_dict={"CRAWLFLEET_DATA_DIR": str(tmp_path), **settings})
    with pytest.raises(ConfigError, match=message):
        SqlStorePipeline.from_crawler(crawler)


# --- documents ---------------------------------------------------------------------------


def test_document_keeps_public_fields_as_plain_json() -> None:
    item = {
        "_key": "k",
        "_html": "<p>x</p>",
        "title": "café\x00\udce9",
        "when": dt.datetime(2024, 3, 5, 10, 0),
        "price": decimal.Decimal("19.90"),
        "count": decimal.Decimal("3"),
        "tags": ("a", "b"),
        "raw": b"\xff\xfe",
        "nan": float("nan"),
        "nested": {1: {"x"}},
    }
    document = to_document(item)
    assert document == {
        "title": "caféé",
        "when": "2024-03-05T10:00:00",
        "price": 19.9,
        "count": 3,
        "tags": ["a", "b"],
        "raw": {"base64": "//4="},
        "nan": None,
        "nested": {"1": ["x"]},
    }
    json.dumps(document)  # plain JSON
    with pytest.raises(TypeError, match="obj: object values cannot be stored"):
        to_document({"obj": object()})


# --- the store pipeline ----------------------------------------------------------------------


def test_store_pipeline_writes_items_with_key_job_type_url(sql_url: str, table: str) -> None:
    crawler = get_crawler(
        Spider,
        settings_dict={
            "CRAWLFLEET_SQL_URL": sql_url,
            "CRAWLFLEET_SQL_TABLE": table,
            "CRAWLFLEET_STORE_BATCH_SECONDS": 0.01,
        },
    )
    pipeline = SqlStorePipeline.from_crawler(crawler)
    pipeline.open_spider(Spider("shop"))
    items: list[dict[str, Any]] = [
        {"_type": "product", "url": "https://shop.test/p/1", "name": "Ein Stück", "price": 3},
        {"_type": "product", "url": "https://shop.test/p/1", "name": "Ein Stück", "price": 4},
        {"_type": "review", "url": "https://shop.test/p/1", "stars": 5, "_key_parts": ["x"]},
    ]

    async def run() -> list[Any]:
        out = [await pipeline.process_item(item) for item in items]
        await pipeline.close_spider()
        return out

    assert _run(run()) == items  # items pass through unchanged
    sink = pipeline.sink
    assert sink.count() == 2
    product = sink.get(make_key("product", ["https://shop.test/p/1"]))
    assert product is not None
    assert (product.job, product.item_type, product.url) == ("shop", "product", items[0]["url"])
    assert product.document == {"url": items[0]["url"], "name": "Ein Stück", "price": 4}
    review = sink.get(make_key("review", ["https://shop.test/p/1"]))
    assert review is not None and "_key_parts" not in review.document
    assert crawler.stats is not None
    assert crawler.stats.get_value("crawlfleet/store/sql/written") == 3


@pytest.mark.parametrize("sql_url", ["postgresql", "mysql"], indirect=True)
def test_refused_records_are_set_aside_and_the_rest_written(
    sql_url: str, table: str, tmp_path: Path
) -> None:
    # SQLite is left out: it stores an over-long key, so there is nothing to refuse.
    stats = get_crawler().stats
    assert stats is not None
    options = StoreOptions(batch_items=10, batch_seconds=0.01, spill_dir=tmp_path / "spill")
    sink = SqlSink(sql_url, table=table, options=options, stats=stats)
    sink.open()
    records = [_record(f"good{i}") for i in range(9)] + [_record("x" * 300)]

    async def run() -> int:
        for record in records:
            await sink.put(record)
        return await sink.close()

    assert _run(run()) == 0
    assert sink.count() == 9
    assert stats.get_value("crawlfleet/store/sql/rejected") == 1
    assert stats.get_value("crawlfleet/store/sql/written") == 9
    rejected = list((tmp_path / "spill").glob("*-rejected.jsonl"))
    assert len(rejected) == 1
    assert json.loads(rejected[0].read_text())["key"] == "x" * 300


def test_table_dropped_mid_crawl_is_created_again(sql_url: str, table: str) -> None:
    sink = SqlSink(sql_url, table=table, options=FAST)
    sink.open()
    _run(sink.put(_record("a")))
    assert poll(lambda: sink.pending == 0)
    sink.drop_table()
    _run(sink.put(_record("b")))
    assert _run(sink.close()) == 0
    assert sink.get("b") is not None


@pytest.mark.parametrize("sql_url", ["postgresql"], indirect=True)
def test_postgres_connections_killed_mid_crawl_lose_nothing(table: str, sql_url: str) -> None:
    app = f"cft-{table}"
    sink = SqlSink(
        sql_url,
        table=table,
        options=FAST,
        engine_options={"connect_args": {"application_name": app}},
    )
    sink.open()
    admin = sa.create_engine(sql_url, poolclass=sa.NullPool)
    killed = 0

    async def run() -> None:
        nonlocal killed
        for i in range(300):
            await sink.put(_record(f"k{i}", v=i))
            if i % 60 == 30:
                await asyncio.sleep(0.03)
                with admin.connect() as conn:
                    killed += conn.execute(
                        sa.text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE application_name = :app"
                        ),
                        {"app": app},
                    ).rowcount
        assert await sink.close() == 0

    _run(run())
    admin.dispose()
    assert killed >= 1
    assert sink.count() == 300


# --- versions across a lost frontier ---------------------------------------------------


def test_a_lost_frontier_does_not_start_a_pages_versions_over(sql_url: str, table: str) -> None:
    sink = SqlSink(sql_url, table=table, versions=True)
    sink.setup()
    first, later = "2026-01-01T00:00:00Z", "2026-03-01T00:00:00Z"

    def write(version: int, title: str, seen: str, changed: str, key: str = "p1") -> None:
        stamps = {"first_seen": seen, "changed_at": changed, "version": version}
        sink.write_batch([_record(key, title=title, **stamps)])

    def held(key: str = "p1") -> dict[str, Any]:
        got = sink.get(key)
        assert got is not None
        return got.document

    try:
        write(1, "a", first, first)
        write(2, "b", first, "2026-02-01T00:00:00Z")
        write(3, "c", first, "2026-02-15T00:00:00Z")
        # the frontier is lost: the page comes back as version 1, first seen now
        write(1, "c", later, later)  # the same fields: the same version, its stamps kept
        assert held() == {
            "title": "c",
            "first_seen": first,
            "changed_at": "2026-02-15T00:00:00Z",
            "version": 3,
        }
        write(1, "d", later, later)  # changed since: the next version, first seen then
        assert held() == {"title": "d", "first_seen": first, "changed_at": later, "version": 4}
        write(2, "e", later, "2026-03-02T00:00:00Z")  # the frontier counts on from 1
        assert held()["version"] == 5 and held()["first_seen"] == first
        write(6, "f", first, "2026-03-03T00:00:00Z")  # a frontier ahead of the store
        assert held()["version"] == 6
        # a page back after it was gone is a new version, whatever its fields
        sink.write_batch([], [ItemMark("p1", "job", "u", "2026-03-04T00:00:00Z")])
        write(1, "f", later, "2026-03-05T00:00:00Z")
        assert held()["version"] == 7 and "gone_at" not in held()
        # items without versions (an item's own "version" is no stamp), and new keys, are
        # written as they come
        sink.write_batch([_record("plain", title="x", version=2)])
        sink.write_batch([_record("plain", title="x", version=1)])
        assert held("plain") == {"title": "x", "version": 1}
        write(1, "n", later, later, key="new")
        assert held("new")["version"] == 1 and held("new")["first_seen"] == later
    finally:
        sink.teardown()
