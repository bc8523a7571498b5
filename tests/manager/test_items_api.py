"""A job's items through the manager: pages of the SQL store on SQLite, PostgreSQL and
MariaDB (a server that does not answer skips its tests, saying why) and of the Redis
stream, newest first, no item twice and none missed; filters; exports parsed back;
bounds; auth; the warning about nodes that store elsewhere."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from crawlfleet.manager.app import create_app
from crawlfleet.manager.routes.items import csv_cell
from crawlfleet.node.launcher import start_node, wait_all
from crawlfleet.pipelines.sinks import StoredItem
from crawlfleet.pipelines.sql import SqlSink
from crawlfleet.pipelines.stream import RedisStreamSink
from crawlfleet.redis.keys import JobKeys
from crawlfleet.state.db import StateDB
from crawlfleet.state.tokens import create_token
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import TestSite
from tests.support.databases import fresh_database_url
from tests.support.manager import Manager, manager_settings

TABLE = "cft_items"
JOB = "shop"
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ItemsManager(Manager):
    items_url: str = ""

    def items(self, job: str = JOB, **params: Any) -> dict[str, Any]:
        r = self.client.get(f"/api/v1/jobs/{job}/items", params=params, headers=self.as_("viewer"))
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def every_page(self, job: str = JOB, **params: Any) -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        cursor = None
        for _ in range(1000):
            page = self.items(job, **params, **({"cursor": cursor} if cursor else {}))
            seen += page["items"]
            cursor = page["next_cursor"]
            if cursor is None:
                return seen
        raise AssertionError("paging does not end")


@contextlib.contextmanager
def _manager(
    redis_url: str, prefix: str, folder: Path, **settings: object
) -> Iterator[ItemsManager]:
    db = StateDB.open(f"sqlite:///{folder / f'state-{uuid.uuid4().hex[:8]}.sqlite3'}")
    db.upgrade()
    tokens = {role: create_token(db, f"{role}-1", role) for role in ("viewer", "operator")}
    app = create_app(manager_settings(prefix, **settings), redis_url, db)
    try:
        with TestClient(app, base_url="http://127.0.0.1") as client:
            yield ItemsManager(
                app, client, db, redis_url, prefix, tokens, str(settings.get("CRAWLFLEET_SQL_URL"))
            )
    finally:
        db.close()


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def items_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new empty database for the SQL item store (MariaDB for "mysql")."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'items.sqlite3'}"
        return
    yield from fresh_database_url(request.param, tmp_path)


@pytest.fixture
def manager(
    items_db: str, redis_server_url: str, key_prefix: str, tmp_path: Path
) -> Iterator[ItemsManager]:
    with _manager(
        redis_server_url,
        key_prefix,
        tmp_path,
        CRAWLFLEET_SQL_URL=items_db,
        CRAWLFLEET_SQL_TABLE=TABLE,
    ) as manager:
        yield manager


def store(url: str, records: list[StoredItem]) -> None:
    """Write *records* as a node's SQL store does (one batch: one updated_at)."""
    sink = SqlSink(url, table=TABLE)
    try:
        sink.setup()
        sink.write_batch(records)
    finally:
        sink.teardown()


def item(key_: str, job: str = JOB, url: str | None = None, **document: Any) -> StoredItem:
    url = url if url is not None else f"https://shop.test/p/{key_}"
    return StoredItem(key_, job, "product", url, {"url": url, "name": key_, **document})


def _order(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(i["stored_at"], i["key"]) for i in items]


def test_pages_newest_first_no_item_twice_none_missed(manager: ItemsManager) -> None:
    # three writes a second apart (MySQL's DATETIME keeps whole seconds): many items
    # share a time, so the key orders them within it
    first = [item(f"a{i:02d}") for i in range(23)]
    store(manager.items_url, first)
    time.sleep(1.1)
    store(manager.items_url, [item(f"b{i:02d}", price=i) for i in range(9)])
    store(manager.items_url, [item("other", job="another-job")])
    time.sleep(1.1)
    store(manager.items_url, [item("a05", name="rewritten")])  # an item written again

    seen = manager.every_page(limit=7)
    keys = [i["key"] for i in seen]
    assert len(keys) == len(set(keys)) == 32, keys
    assert set(keys) == {f"a{i:02d}" for i in range(23)} | {f"b{i:02d}" for i in range(9)}
    assert _order(seen) == sorted(_order(seen), reverse=True)
    assert keys[0] == "a05" and seen[0]["document"]["name"] == "rewritten"
    assert keys[1:10] == [f"b{i:02d}" for i in reversed(range(9))]
    one = seen[0]
    assert one["url"] == "https://shop.test/p/a05" and one["job"] == JOB
    assert one["stored_at"].endswith("Z") and one["created_at"] < one["stored_at"]
    page = manager.items(limit=200)
    assert [i["key"] for i in page["items"]] == keys and page["next_cursor"] is None
    assert page["store"]["table"] == TABLE and page["notes"] == []
    assert manager.items(job="another-job")["items"][0]["key"] == "other"


def test_filters_by_url_and_by_a_field(manager: ItemsManager) -> None:
    store(
        manager.items_url,
        [
            item("k1", url="https://shop.test/Sale/50%_off", colour="red", stock=5),
            item("k2", url="https://shop.test/sale/5000_off", colour="blue", stock=50),
            item("k3", url="https://shop.test/new", colour="red", stock=0, tags=["x"]),
            item("k4", url="https://shop.test/none", colour="Red", sale=True, price=2.5),
            item("k5", url="https://shop.test/five", sale=False, price=12),
        ],
    )

    def keys(**params: Any) -> list[str]:
        return sorted(i["key"] for i in manager.every_page(limit=1, **params))

    assert keys(q="SALE/") == ["k1", "k2"]  # any case
    assert keys(q="50%_") == ["k1"]  # % and _ are themselves, not wildcards
    assert keys(field="colour", value="red") == ["k1", "k3"]
    assert keys(field="stock", value="5") == ["k1"]  # a number, as text
    assert keys(field="stock", value="0") == ["k3"]
    assert keys(field="colour", value="red", q="sale") == ["k1"]
    assert keys(field="sale", value="true") == ["k4"]  # true/false as words
    assert keys(field="sale", value="false") == ["k5"]
    assert keys(field="price", value="2.5") == ["k4"]
    assert keys(field="tags", value="x") == []  # a list is no text
    assert keys(field="missing", value="red") == []
    assert keys(q="nowhere") == []


def test_exports_jsonl_and_csv(manager: ItemsManager) -> None:
    store(
        manager.items_url,
        [
            item("e1", colour="red", dims={"w": 2}, formula='=HYPERLINK("http://evil")'),
            item("e2", colour="blue", note="-1+2", n=-3, **{"key": "not-the-key"}),
            item("e3", url="https://shop.test/x", colour="red"),
            # field names come from crawled pages too
            item("e4", **{'=HYPERLINK("http://evil")': "x", "@SUM(1+1)": "y"}),
        ],
    )
    headers = manager.as_("viewer")
    r = manager.client.get(
        f"/api/v1/jobs/{JOB}/items/export",
        params={"format": "jsonl", "field": "colour", "value": "red"},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/x-ndjson")
    assert r.headers["content-disposition"] == f'attachment; filename="{JOB}-items.jsonl"'
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert sorted(x["key"] for x in lines) == ["e1", "e3"]  # e4 has no colour
    assert {x["key"]: x["document"] for x in lines}["e1"]["dims"] == {"w": 2}

    r = manager.client.get(
        f"/api/v1/jobs/{JOB}/items/export", params={"format": "csv"}, headers=headers
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert sorted(row["key"] for row in rows) == ["e1", "e2", "e3", "e4"]
    header = next(csv.reader(io.StringIO(r.text)))
    # a formula in the header row is neutralised as in any other
    assert '\'=HYPERLINK("http://evil")' in header and "'@SUM(1+1)" in header
    assert not any(title.startswith(("=", "@", "+", "-")) for title in header)
    assert header[:3] == ["key", "url", "stored_at"]
    assert "url" not in header[3:] and "document.url" not in header  # same as the column
    assert "document.key" in header  # e2's own "key" field differs from its key
    by_key = {row["key"]: row for row in rows}
    assert by_key["e1"]["formula"] == '\'=HYPERLINK("http://evil")'
    assert json.loads(by_key["e1"]["dims"]) == {"w": 2}
    assert by_key["e2"]["note"] == "'-1+2" and by_key["e2"]["n"] == "-3"
    assert by_key["e2"]["document.key"] == "not-the-key"
    assert by_key["e3"]["dims"] == "" and by_key["e3"]["url"] == "https://shop.test/x"


def test_bounds_and_auth(manager: ItemsManager) -> None:
    base = f"/api/v1/jobs/{JOB}/items"
    viewer = manager.as_("viewer")
    for params in (
        {"limit": 201},
        {"limit": 0},
        {"cursor": "bm90LWEtY3Vyc29y"},
        {"cursor": "%%%"},
        {"field": "colour"},
        {"value": "red"},
        {"field": "a b", "value": "x"},
        {"source": "mongodb"},
    ):
        r = manager.client.get(base, params=params, headers=viewer)
        assert r.status_code == 400, (params, r.text)
        assert set(r.json()["error"]) == {"code", "message"}
    for path in (base, f"{base}/export"):
        assert manager.client.get(path).status_code == 401
        assert manager.client.get(path, headers={"Authorization": "Bearer nope"}).status_code == 401
        assert manager.client.get(path, headers=viewer).status_code == 200
    assert manager.client.get("/api/v1/jobs/a%7Bb/items", headers=viewer).status_code == 400


def test_export_is_bounded(redis_server_url: str, key_prefix: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'items.sqlite3'}"
    store(url, [item(f"k{i:03d}") for i in range(250)])
    with _manager(
        redis_server_url,
        key_prefix,
        tmp_path,
        CRAWLFLEET_SQL_URL=url,
        CRAWLFLEET_SQL_TABLE=TABLE,
        CRAWLFLEET_MANAGER_EXPORT_MAX_ITEMS=220,
    ) as manager:
        r = manager.client.get(f"/api/v1/jobs/{JOB}/items/export", headers=manager.as_("viewer"))
        assert r.headers["x-export-max-items"] == "220"
        lines = r.text.splitlines()
        assert len(lines) == 220
        assert [json.loads(x)["key"] for x in lines] == [f"k{i:03d}" for i in range(249, 29, -1)]


def test_no_store_yet_and_a_store_that_does_not_answer(
    redis_server_url: str, key_prefix: str, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere" / "items.sqlite3"
    with _manager(
        redis_server_url, key_prefix, tmp_path, CRAWLFLEET_SQL_URL=f"sqlite:///{missing}"
    ) as manager:
        page = manager.items()
        assert page["items"] == [] and page["next_cursor"] is None
        assert "CRAWLFLEET_SQL_URL" in page["notes"][0] and str(missing) in page["notes"][0]
        assert not missing.exists()  # reading never makes a store
    down = "postgresql+psycopg://cft:s3cret-pw@127.0.0.1:9/items"
    with _manager(redis_server_url, key_prefix, tmp_path, CRAWLFLEET_SQL_URL=down) as manager:
        for path in ("", "/export"):
            r = manager.client.get(f"/api/v1/jobs/{JOB}/items{path}", headers=manager.as_("viewer"))
            assert r.status_code == 503, r.text
            error = r.json()["error"]
            assert error["code"] == "item_store_unavailable"
            assert "CRAWLFLEET_SQL_URL" in error["message"]
            assert "postgresql://127.0.0.1:9/items" in error["message"]
            assert "s3cret" not in r.text


def test_the_stream_source(manager_on_sqlite: ItemsManager, redis_server_url: str) -> None:
    manager = manager_on_sqlite
    sink = RedisStreamSink(redis_server_url, prefix=manager.prefix)
    try:
        sink.setup()
        sink.write_batch(
            [item(f"s{i:02d}", colour="red" if i % 3 == 0 else "blue") for i in range(25)]
        )
        sink.write_batch([item("s03", colour="green")])  # a second version: its own entry
    finally:
        sink.teardown()
    client = sink._client()
    stream = JobKeys.of(manager.prefix, JOB).items
    client.xadd(stream, {b"v": b"9", b"key": b"bad"})  # not an entry this version reads
    try:
        seen = manager.every_page(source="stream", limit=6)
        assert [i["key"] for i in seen] == ["s03"] + [f"s{i:02d}" for i in reversed(range(25))]
        entries = [i["entry"] for i in seen]
        assert len(set(entries)) == 26 and all(i["created_at"] is None for i in seen)
        first = manager.items(source="stream", limit=6)
        assert first["malformed"] == 1 and first["store"]["prefix"] == manager.prefix
        red = manager.every_page(source="stream", limit=2, field="colour", value="red")
        assert [i["key"] for i in red] == [f"s{i:02d}" for i in (24, 21, 18, 15, 12, 9, 6, 3, 0)]
        assert [i["key"] for i in manager.every_page(source="stream", q="/S1")] == [
            f"s{i:02d}" for i in reversed(range(10, 20))
        ]
        r = manager.client.get(
            f"/api/v1/jobs/{JOB}/items/export",
            params={"source": "stream", "format": "jsonl"},
            headers=manager.as_("viewer"),
        )
        assert [json.loads(x)["key"] for x in r.text.splitlines()] == [i["key"] for i in seen]
        assert manager.items(job="no-such-job", source="stream")["items"] == []
    finally:
        client.close()


@pytest.fixture
def manager_on_sqlite(
    redis_server_url: str, key_prefix: str, tmp_path: Path
) -> Iterator[ItemsManager]:
    with _manager(
        redis_server_url,
        key_prefix,
        tmp_path,
        CRAWLFLEET_SQL_URL=f"sqlite:///{tmp_path / 'items.sqlite3'}",
        CRAWLFLEET_SQL_TABLE=TABLE,
    ) as manager:
        yield manager


def test_nodes_that_store_elsewhere_are_named(manager_on_sqlite: ItemsManager) -> None:
    manager = manager_on_sqlite
    mine = manager.items()["store"]
    assert mine == {
        "store": "sql",
        "database": mine["database"],
        "table": TABLE,
    } and mine["database"].startswith("sqlite:///")
    other = {"store": "sql", "database": "postgresql://db.example:5432/items", "table": TABLE}
    mongo = {"store": "mongodb", "server": "mongodb://m.example", "collection": "crawl.items"}
    manager.beat(JOB, "here", item_stores=[mine])
    manager.beat(JOB, "there", item_stores=[other, mongo])
    manager.beat(JOB, "old")  # publishes no stores (an older node): not counted
    page = manager.items()
    assert page["nodes_elsewhere"] == {
        "there": "postgresql://db.example:5432/items table cft_items"
    }
    notes = " ".join(page["notes"])
    assert "CRAWLFLEET_SQL_URL" in notes and "there" in notes
    assert "MongoDB" in notes and "not browsable" in notes
    stream = manager.items(source="stream")
    assert stream["nodes_elsewhere"] == {}


def test_csv_cells() -> None:
    assert csv_cell(None) == "" and csv_cell(True) == "true" and csv_cell(2.5) == "2.5"
    assert csv_cell(-4) == "-4"  # a number is no formula
    for text in ("=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx"):
        assert csv_cell(text) == "'" + text
    assert csv_cell(["=a"]) == '["=a"]' and csv_cell({"k": 1}) == '{"k": 1}'
    assert csv_cell("plain") == "plain"


@pytest.mark.slow
def test_a_real_node_says_where_it_stores_and_the_manager_compares(
    redis_server_url: str, key_prefix: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    """A crawling node's items reach the manager that reads its store; a manager that
    reads another store names the node in nodes_elsewhere."""
    theirs = f"sqlite:///{tmp_path / 'node-items.sqlite3'}"
    other = f"sqlite:///{tmp_path / 'other-items.sqlite3'}"
    with TestSite(SiteModel(pages=300, hosts=1), latency_seconds=0.05) as site:
        proc = start_node(
            "crawlfleet.testsite.spider:TestSiteSpider",
            job=JOB,
            redis_url=redis_server_url,
            log=tmp_path / "node.log",
            spider_args={"start_urls": ",".join(site.seed_urls)},
            settings={
                **node_env,
                "CONCURRENT_REQUESTS": 2,
                "CRAWLFLEET_HEARTBEAT_SECONDS": 0.3,
                "CRAWLFLEET_STORES": "sql",
                "CRAWLFLEET_SQL_URL": theirs,
                "CRAWLFLEET_SQL_TABLE": TABLE,
            },
            cwd=ROOT,
        )
        try:
            with _manager(
                redis_server_url,
                key_prefix,
                tmp_path,
                CRAWLFLEET_SQL_URL=theirs,
                CRAWLFLEET_SQL_TABLE=TABLE,
            ) as manager:
                manager.wait_for(
                    "the node's items", lambda: len(manager.items()["items"]) >= 3, timeout=60
                )
                assert manager.items()["nodes_elsewhere"] == {}
            with _manager(
                redis_server_url,
                key_prefix,
                tmp_path,
                CRAWLFLEET_SQL_URL=other,
                CRAWLFLEET_SQL_TABLE=TABLE,
            ) as manager:
                page = manager.items()
                assert page["items"] == [] and len(page["nodes_elsewhere"]) == 1, page
                (where,) = page["nodes_elsewhere"].values()
                assert where.startswith(f"sqlite:///{tmp_path / 'node-items.sqlite3'} on ")
                assert "CRAWLFLEET_SQL_URL" in " ".join(page["notes"])
        finally:
            if proc.poll() is None:
                proc.terminate()
            if wait_all([proc], 20) == [None]:
                proc.kill()
                proc.wait()


def test_the_manager_reads_its_item_store_from_the_environment_as_nodes_do(
    redis_server_url: str,
    key_prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"sqlite:///{tmp_path / 'env-items.sqlite3'}"
    store(url, [item("from-env")])
    monkeypatch.setenv("CRAWLFLEET_SQL_URL", url)
    monkeypatch.setenv("CRAWLFLEET_SQL_TABLE", TABLE)
    monkeypatch.setenv("CRAWLFLEET_SQL_ULR", "sqlite:///typo.sqlite3")  # said, not read
    with caplog.at_level("WARNING"), _manager(redis_server_url, key_prefix, tmp_path) as manager:
        assert [i["key"] for i in manager.items()["items"]] == ["from-env"]
    assert (
        "The environment variable CRAWLFLEET_SQL_ULR is no crawlfleet setting: not read "
        "(did you mean CRAWLFLEET_SQL_URL?)"
    ) in caplog.text
    # -s (the command line) still wins over the environment
    assert manager_settings(key_prefix, CRAWLFLEET_SQL_URL="x")["CRAWLFLEET_SQL_URL"] == "x"
