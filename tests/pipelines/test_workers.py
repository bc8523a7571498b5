"""Item workers: from a job's Redis stream into SQL, at least once, without duplicates.

Real Redis, real SQL (PostgreSQL when it answers, else SQLite), and for the crash test
real worker processes, one of them killed with SIGKILL in the middle of a batch.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from scrapy.settings import Settings

from crawlfleet.cli import items as items_command
from crawlfleet.exceptions import ConfigError
from crawlfleet.pipelines.buffered import StoreOptions
from crawlfleet.pipelines.mongo import MongoSink
from crawlfleet.pipelines.sinks import ItemMark, StoredItem
from crawlfleet.pipelines.sql import SqlSink
from crawlfleet.pipelines.stream import RedisStreamSink, encode_entry
from crawlfleet.pipelines.worker_options import WorkerOptions, WorkerReport, store_for_url
from crawlfleet.pipelines.workers import ItemWorker
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.redis.localcluster import RedisProcess
from crawlfleet.redis.scripts import script_source
from crawlfleet.settings.config import settings_with_defaults
from tests.support.databases import require_server, sql_test_url, unique_table
from tests.support.item_stream import JOB, produce, stored_item
from tests.support.waiting import poll

ROOT = Path(__file__).resolve().parents[2]


def _work(redis_url: str, prefix: str, store: SqlSink, **options: Any) -> WorkerReport:
    values: dict[str, Any] = {
        "until_empty": True,
        "consumer": "t1",
        "batch_items": 50,
        "claim_idle_seconds": 1.0,
        "retry_min_seconds": 0.05,
        "retry_max_seconds": 0.2,
        **options,
    }

    async def main() -> WorkerReport:
        client = make_client(redis_url)
        try:
            worker = ItemWorker(client, JobKeys.of(prefix, JOB), store, WorkerOptions(**values))
            return await worker.run()
        finally:
            await client.aclose()

    return asyncio.run(asyncio.wait_for(main(), 60))


@pytest.fixture
def sql_store(tmp_path: Path) -> Iterator[SqlSink]:
    store = SqlSink(sql_test_url(tmp_path), table=unique_table())
    store.setup()
    yield store
    store.drop_table()


def _version(store: SqlSink, key: str) -> Any:
    stored = store.get(key)
    return None if stored is None else stored.document["v"]


# --- one worker ----------------------------------------------------------------------------


def test_worker_upserts_by_key_acks_and_deletes(
    redis_server_url: str, key_prefix: str, sync_redis: redis.Redis, sql_store: SqlSink
) -> None:
    produce(redis_server_url, key_prefix, [stored_item(i) for i in range(200)])
    # a second run of the sink: a batch keeps only the last version of a key
    produce(redis_server_url, key_prefix, [stored_item(i, version=2) for i in range(100)])
    keys = JobKeys.of(key_prefix, JOB)
    assert sync_redis.xlen(keys.items) == 300

    report = _work(redis_server_url, key_prefix, sql_store)
    assert (report.read, report.acknowledged, report.deleted) == (300, 300, 300)
    assert report.dead_lettered == report.claimed == report.left_pending == 0
    assert sql_store.count() == 200
    assert (_version(sql_store, "key00000"), _version(sql_store, "key00150")) == (2, 1)
    stored = sql_store.get("key00007")
    assert stored is not None
    assert (stored.job, stored.item_type, stored.url) == (JOB, "product", "https://shop.example/7")
    assert sync_redis.xlen(keys.items) == 0  # every group stored them: deleted
    assert sync_redis.xpending(keys.items, "items")["pending"] == 0

    again = _work(redis_server_url, key_prefix, sql_store)
    assert again.read == 0 and sql_store.count() == 200


def test_worker_applies_marks_after_the_items_before_them(
    redis_server_url: str, key_prefix: str, sync_redis: redis.Redis, sql_store: SqlSink
) -> None:
    gone = "2026-02-03T04:05:06+00:00"

    def mark(i: int) -> ItemMark:
        return ItemMark(f"key{i:05d}", JOB, f"https://shop.example/{i}", gone)

    # one worker batch: items 1 and 2, their marks and one of a key never stored, then
    # a new version of 2 (its page back); item 3's mark comes in a later batch
    produce(redis_server_url, key_prefix, [stored_item(1), stored_item(2)])
    produce(redis_server_url, key_prefix, [mark(1), mark(2), mark(9)])
    produce(redis_server_url, key_prefix, [stored_item(2, version=2)])
    report = _work(redis_server_url, key_prefix, sql_store)
    assert (report.read, report.acknowledged, report.dead_lettered) == (6, 6, 0)
    produce(redis_server_url, key_prefix, [stored_item(3)])
    _work(redis_server_url, key_prefix, sql_store)
    produce(redis_server_url, key_prefix, [mark(3)])
    assert _work(redis_server_url, key_prefix, sql_store).acknowledged == 1

    documents = {i: sql_store.get(f"key{i:05d}") for i in (1, 2, 3)}
    assert {i: r.document if r else None for i, r in documents.items()} == {
        1: {"n": 1, "v": 1, "gone_at": gone},
        2: {"n": 2, "v": 2},
        3: {"n": 3, "v": 1, "gone_at": gone},
    }
    assert sql_store.get("key00009") is None and sql_store.count() == 3


def test_malformed_entries_go_to_the_dead_letter_stream(
    redis_server_url: str, key_prefix: str, sync_redis: redis.Redis, sql_store: SqlSink
) -> None:
    keys = JobKeys.of(key_prefix, JOB)
    bad: list[dict[bytes, bytes]] = [
        {b"v": b"2", b"key": b"k", b"job": JOB.encode(), b"type": b"t", b"doc": b"{}"},
        {b"v": b"1", b"job": JOB.encode(), b"type": b"t", b"doc": b"{}"},
        {b"v": b"1", b"key": b"k", b"job": JOB.encode(), b"type": b"t", b"doc": b"{oops"},
        {b"\x80\x04\x95": b"\x00pickle\xff"},
    ]
    for i in range(10):
        sync_redis.xadd(keys.items, encode_entry(stored_item(i)))  # type: ignore[arg-type]
        if i < len(bad):
            sync_redis.xadd(keys.items, bad[i])  # type: ignore[arg-type]

    report = _work(redis_server_url, key_prefix, sql_store, batch_items=4)
    assert (report.read, report.dead_lettered, report.acknowledged) == (14, 4, 10)
    assert sql_store.count() == 10
    dead: Any = sync_redis.xrange(keys.items_dead)
    assert len(dead) == 4
    fields = dead[0][1]
    assert fields[b"reason"] == b"malformed: entry version b'2', expected 1"
    assert (fields[b"group"], fields[b"consumer"]) == (b"items", b"t1")
    assert fields[b"entry:doc"] == b"{}" and fields[b"id"].count(b"-") == 1
    assert dead[3][1][b"entry:\x80\x04\x95"] == b"\x00pickle\xff"  # kept byte for byte
    assert sync_redis.xlen(keys.items) == 0


def test_records_the_store_refuses_go_to_the_dead_letter_stream(
    redis_server_url: str, key_prefix: str, sync_redis: redis.Redis
) -> None:
    store = SqlSink(require_server("postgresql"), table=unique_table())
    try:
        # PostgreSQL refuses a key longer than the column and NUL in JSONB text
        records = [stored_item(i) for i in range(20)]
        records[5] = stored_item(5, key="k" * 300)
        records[9] = StoredItem("key-nul", JOB, "t", None, {"text": "a\\u0000b", "raw": "\x00"})
        produce(redis_server_url, key_prefix, records)
        report = _work(redis_server_url, key_prefix, store)
        assert (report.dead_lettered, report.acknowledged) == (2, 18)
        assert store.count() == 18
        dead: Any = sync_redis.xrange(JobKeys.of(key_prefix, JOB).items_dead)
        assert all(f[b"reason"].startswith(b"refused by the store: ") for _, f in dead)
    finally:
        store.drop_table()


def test_entries_stay_until_every_group_stored_them(
    redis_server_url: str, key_prefix: str, sync_redis: redis.Redis, sql_store: SqlSink
) -> None:
    keys = JobKeys.of(key_prefix, JOB)
    sync_redis.xgroup_create(keys.items, "mongo", id="0", mkstream=True)
    produce(redis_server_url, key_prefix, [stored_item(i) for i in range(60)])
    first = _work(redis_server_url, key_prefix, sql_store)
    assert (first.acknowledged, first.deleted) == (60, 0)
    assert sync_redis.xlen(keys.items) == 60  # group "mongo" has not read them yet
    second = _work(redis_server_url, key_prefix, sql_store, group="mongo")
    assert (second.read, second.deleted) == (60, 60)
    assert sync_redis.xlen(keys.items) == 0


def test_prune_forgets_only_consumers_without_pending_entries(
    key_prefix: str, sync_redis: redis.Redis
) -> None:
    keys = JobKeys.of(key_prefix, JOB)
    for i in range(3):
        sync_redis.xadd(keys.items, encode_entry(stored_item(i)))  # type: ignore[arg-type]
    sync_redis.xgroup_create(keys.items, "items", id="0")
    sync_redis.xreadgroup("items", "holder", {keys.items: ">"}, count=1)
    sync_redis.xreadgroup("items", "idle", {keys.items: ">"}, count=1)
    second: Any = sync_redis.xrange(keys.items, count=2)[1]  # type: ignore[index]
    sync_redis.xack(keys.items, "items", second[0])
    sync_redis.xgroup_createconsumer(keys.items, "items", "me")
    time.sleep(0.05)
    prune = sync_redis.register_script(script_source("items_prune"))
    gone = prune(keys=keys.for_items_prune(), args=["items", 10, "me"])
    assert gone == [b"idle"]
    names = {c["name"] for c in sync_redis.xinfo_consumers(keys.items, "items")}
    assert names == {b"holder", b"me"}


# --- options, store URLs, status ---------------------------------------------------------


def test_options_and_store_urls(tmp_path: Path) -> None:
    settings = settings_with_defaults({"CRAWLFLEET_ITEMS_CLAIM_IDLE_SECONDS": "5"})
    options = WorkerOptions.from_settings(settings, consumer="w9", group=None)
    assert (options.group, options.consumer, options.claim_idle_seconds) == ("items", "w9", 5.0)
    assert options.batch_items == 500 and options.delete_stored
    with pytest.raises(ConfigError, match="CRAWLFLEET_ITEMS_CLAIM_IDLE_SECONDS"):
        WorkerOptions.from_settings(
            settings_with_defaults({"CRAWLFLEET_ITEMS_CLAIM_IDLE_SECONDS": 0})
        )
    sqlite_store = store_for_url(f"sqlite:///{tmp_path}/x.db", settings)
    assert isinstance(sqlite_store, SqlSink) and sqlite_store.table.name == "crawlfleet_items"
    mongo = store_for_url("mongodb://u:pw@127.0.0.1:1/shop", Settings(settings))
    assert isinstance(mongo, MongoSink)
    assert (mongo.database, mongo.collection_name) == ("shop", "crawlfleet_items")
    assert "pw" not in mongo.target
    with pytest.raises(ConfigError, match="store URL 'oracle://h/db'"):
        store_for_url("oracle://h/db", settings)


def test_status_command_shows_groups_and_pending(
    redis_server_url: str,
    key_prefix: str,
    sync_redis: redis.Redis,
    capsys: pytest.CaptureFixture[str],
) -> None:
    keys = JobKeys.of(key_prefix, JOB)
    for i in range(8):
        sync_redis.xadd(keys.items, encode_entry(stored_item(i)))  # type: ignore[arg-type]
    sync_redis.xgroup_create(keys.items, "items", id="0")
    sync_redis.xreadgroup("items", "c1", {keys.items: ">"}, count=5)
    parser = argparse.ArgumentParser()
    items_command.add_arguments(parser)
    args = parser.parse_args(
        ["status", JOB, "--json", "--redis-url", redis_server_url,
         "-s", f"CRAWLFLEET_KEY_PREFIX={key_prefix}"]
    )  # fmt: skip
    assert items_command.run(args) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["length"], status["dead_letters"]) == (8, 0)
    (group,) = status["groups"]
    assert (group["name"], group["pending"]) == ("items", 5)
    assert group["consumers"][0]["name"] == "c1" and group["consumers"][0]["pending"] == 5


# --- two worker processes, one killed -------------------------------------------------------


class _Lock:
    """Holds the items table locked, so that workers block in the middle of a batch."""

    def __init__(self, store: SqlSink) -> None:
        self.store = store
        self._release: Callable[[], None] | None = None

    def take(self) -> None:
        if self.store.url.get_backend_name() == "postgresql":
            conn = self.store.engine.connect()
            trans = conn.begin()
            conn.execute(sa.text(f"LOCK TABLE {self.store.table.name} IN ACCESS EXCLUSIVE MODE"))

            def release_pg() -> None:
                trans.rollback()
                conn.close()

            self._release = release_pg
        else:
            path = self.store.url.database
            assert path is not None
            lite = sqlite3.connect(path, timeout=0, isolation_level=None)
            lite.execute("BEGIN EXCLUSIVE")

            def release_sqlite() -> None:
                lite.execute("ROLLBACK")
                lite.close()

            self._release = release_sqlite

    def release(self) -> None:
        if self._release is not None:
            self._release()
            self._release = None


def _spawn(
    redis_url: str, prefix: str, store: SqlSink, name: str, log: Path
) -> subprocess.Popen[bytes]:
    url = store.url.render_as_string(hide_password=False)
    args = [
        sys.executable, "-m", "tests.support.items_command", "work", JOB, "--to", url,
        "--consumer", name, "--batch", "50", "--claim-idle", "1", "--redis-url", redis_url,
        "-s", f"CRAWLFLEET_KEY_PREFIX={prefix}", "-s", f"CRAWLFLEET_SQL_TABLE={store.table.name}",
        "-s", "CRAWLFLEET_STORE_RETRY_MIN_SECONDS=0.05",
        "-s", "CRAWLFLEET_STORE_RETRY_MAX_SECONDS=0.2",
    ]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


def test_killed_worker_loses_nothing_and_its_entries_are_claimed(
    redis_server_url: str,
    key_prefix: str,
    sync_redis: redis.Redis,
    sql_store: SqlSink,
    tmp_path: Path,
) -> None:
    keys = JobKeys.of(key_prefix, JOB)
    produce(redis_server_url, key_prefix, [stored_item(i) for i in range(2000)])

    def pending_of(name: str) -> int:
        try:
            consumers = sync_redis.xinfo_consumers(keys.items, "items")
        except redis.ResponseError:  # no group yet
            return 0
        for consumer in consumers:
            if consumer["name"] == name.encode():
                return int(consumer["pending"])
        return 0

    lock = _Lock(sql_store)
    lock.take()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        victim = _spawn(redis_server_url, key_prefix, sql_store, "victim", tmp_path / "v.log")
        survivor = _spawn(redis_server_url, key_prefix, sql_store, "survivor", tmp_path / "s.log")
        procs += [victim, survivor]
        assert poll(lambda: pending_of("victim") > 0 and pending_of("survivor") > 0, 20)
        # both hold a batch they cannot write yet: kill one in the middle of its batch
        held = pending_of("victim")
        assert held == 50
        victim.kill()
        victim.wait(10)
        lock.release()
        # more items while the survivor works, some newer versions of stored keys
        produce(
            redis_server_url,
            key_prefix,
            [stored_item(i, version=2) for i in range(1500, 2500)],
        )
        assert poll(lambda: sql_store.count() == 2500, timeout=30), sql_store.count()
        assert poll(lambda: sync_redis.xpending(keys.items, "items")["pending"] == 0, timeout=10)
        assert pending_of("victim") == 0  # claimed by the survivor
        survivor.send_signal(signal.SIGTERM)
        assert survivor.wait(15) == 0, "SIGTERM must stop the worker cleanly"
    finally:
        lock.release()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    log = (tmp_path / "s.log").read_text()
    assert "claimed" in log, log[-3000:]
    claimed = sum(int(part.split()[0]) for part in log.split("claimed ")[1:] if part[0].isdigit())
    assert claimed >= held
    with sql_store.engine.connect() as conn:
        total, distinct = conn.execute(
            sa.text(f"SELECT count(*), count(DISTINCT key) FROM {sql_store.table.name}")
        ).one()
    assert total == distinct == 2500  # nothing lost, no duplicate rows
    assert _version(sql_store, "key00000") == 1 and _version(sql_store, "key01999") == 2
    assert _version(sql_store, "key02499") == 2
    assert sync_redis.xlen(keys.items) == 0
    assert os.path.getsize(tmp_path / "v.log") > 0


def test_worker_rides_out_a_redis_restart(tmp_path: Path, sql_store: SqlSink) -> None:
    """Redis killed -9 and restarted (AOF) under a running worker: it backs off,
    reconnects, and stores everything; a stop request then ends it cleanly."""
    server = RedisProcess(tmp_path / "redis")
    server.start()
    try:
        produce(server.url, "cfw", [stored_item(i) for i in range(200)])

        async def scenario() -> WorkerReport:
            client = make_client(server.url, retry=Retry(NoBackoff(), 1))
            options = WorkerOptions(
                consumer="w1", batch_items=50, retry_min_seconds=0.05, retry_max_seconds=0.2
            )
            worker = ItemWorker(client, JobKeys.of("cfw", JOB), sql_store, options)
            task = asyncio.ensure_future(worker.run())
            try:
                assert await _until(lambda: sql_store.count() == 200)
                server.kill()
                await asyncio.sleep(0.5)
                await asyncio.to_thread(server.start)
                await asyncio.to_thread(
                    produce, server.url, "cfw", [stored_item(i, 2) for i in range(150, 300)]
                )
                assert await _until(lambda: sql_store.count() == 300)
                assert await _until(lambda: _version(sql_store, "key00299") == 2)
                worker.stop()
                return await asyncio.wait_for(task, 10)
            finally:
                task.cancel()
                await client.aclose()

        report = asyncio.run(asyncio.wait_for(scenario(), 40))
    finally:
        server.close()
    assert report.retries >= 1 and report.left_pending == 0
    # 350 entries were acknowledged, but an XACK that Redis ran just before the kill -9
    # lost its reply: the worker cannot count that batch (50), and nothing is left
    # pending (the entries stored twice are upserts)
    assert report.acknowledged in (300, 350), report
    assert _version(sql_store, "key00160") == 2 and _version(sql_store, "key00010") == 1


async def _until(condition: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await asyncio.to_thread(condition):
            return True
        await asyncio.sleep(0.05)
    return False


def test_every_declared_group_gets_every_item(
    redis_server_url: str,
    key_prefix: str,
    sync_redis: redis.Redis,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two groups declared with the stream store (CRAWLFLEET_ITEMS_GROUPS): the first
    group's workers, done first, delete nothing the second group has not stored; a
    group nobody declared, started after that, says what it missed."""
    options = StoreOptions(batch_items=500, batch_seconds=0.01, buffer_items=5000)
    sink = RedisStreamSink(
        redis_server_url, prefix=key_prefix, groups=["items", "search"], options=options
    )
    sink.open()

    async def put_all() -> int:
        for i in range(120):
            await sink.put(stored_item(i))
        return await sink.close()

    assert asyncio.run(put_all()) == 0
    stores = [SqlSink(f"sqlite:///{tmp_path / f'{g}.sqlite3'}") for g in ("items", "search")]
    for store in stores:
        store.setup()
    first = _work(redis_server_url, key_prefix, stores[0], group="items")
    second = _work(redis_server_url, key_prefix, stores[1], group="search")
    assert first.stored == second.stored == 120
    assert [s.count() for s in stores] == [120, 120]
    stream = JobKeys.of(key_prefix, JOB).items
    assert sync_redis.xlen(stream) == 0  # both done: deleted
    late = SqlSink(f"sqlite:///{tmp_path / 'late.sqlite3'}")
    late.setup()
    with caplog.at_level(logging.WARNING, logger="crawlfleet.pipelines.workers"):
        assert _work(redis_server_url, key_prefix, late, group="late").stored == 0
    assert "Item group late is new" in caplog.text and "120 items added before it" in caplog.text
