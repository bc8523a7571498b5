"""The ItemSink contract, run against every sink: SQLite, PostgreSQL, MySQL/MariaDB,
the Redis item stream and MongoDB (only with CRAWLFLEET_TEST_MONGODB_URL).

Upsert by key, batching by size and by delay, a store that goes down and comes back
(nothing lost), back-pressure when the buffer is full, spill-and-replay when the store
is still down at close, and ``save``: it returns only once the record is in the store,
and gives up (ItemNotDurable) when the crawl stops while the store is down. Marks (a
page gone: ``gone_at`` set on its stored item, the rest kept) take the same path: in
order with the items of a batch, a no-op for a key not stored, durable once ``save``
returns, spilled and replayed like items. Outages
are real: an exclusive lock held by another connection for SQLite, a TCP proxy that is
stopped and started for the servers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from scrapy.statscollectors import StatsCollector
from scrapy.utils.test import get_crawler
from sqlalchemy.engine import make_url

from crawlfleet.exceptions import ItemNotDurable
from crawlfleet.pipelines.buffered import BufferedSink, StoreOptions
from crawlfleet.pipelines.mongo import MongoSink
from crawlfleet.pipelines.sinks import ItemMark, StoredItem
from crawlfleet.pipelines.sql import SqlSink
from crawlfleet.pipelines.stream import RedisStreamSink
from crawlfleet.testsite.tcpproxy import TcpProxy
from tests.support.databases import require_mongodb, require_server, unique_table, with_host_port
from tests.support.waiting import poll

BACKENDS = ["sqlite", "postgresql", "mysql", "redis", "mongodb"]
FAST = StoreOptions(
    batch_items=10,
    batch_seconds=0.02,
    buffer_items=1000,
    retry_min_seconds=0.05,
    retry_max_seconds=0.2,
    close_timeout_seconds=5.0,
)


@dataclass
class Harness:
    """Builds sinks of one backend on one table and can take that store down."""

    make: Callable[[StoreOptions], BufferedSink]
    begin_outage: Callable[[], None]
    end_outage: Callable[[], None]
    stats: StatsCollector
    #: The sink's name in its stats (``crawlfleet/store/<name>/...``).
    name: str = "sql"

    def sink(self, **changes: Any) -> BufferedSink:
        return self.make(dataclasses.replace(FAST, **changes))

    def stat(self, name: str) -> str:
        return f"crawlfleet/store/{self.name}/{name}"


def _record(i: int, version: int = 1, **extra: Any) -> StoredItem:
    document = {"n": i, "version": version, "title": f"标题 {i} — café", **extra}
    return StoredItem(f"key{i:04d}", "job-a", "product", f"https://example.com/{i}", document)


GONE_AT = "2026-02-03T04:05:06+00:00"


def _mark(i: int, gone_at: str = GONE_AT) -> ItemMark:
    return ItemMark(f"key{i:04d}", "job-a", f"https://example.com/{i}", gone_at)


async def _put_all(sink: BufferedSink, records: list[StoredItem | ItemMark]) -> None:
    for record in records:
        await sink.put(record)


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


@pytest.fixture(params=BACKENDS)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    backend: str = request.param
    table = unique_table()
    stats = get_crawler().stats
    assert stats is not None
    spill = tmp_path / "unwritten"
    if backend == "sqlite":
        path = tmp_path / "items.sqlite3"
        url = f"sqlite:///{path}"
        lock: list[sqlite3.Connection] = []

        def make(options: StoreOptions) -> BufferedSink:
            options = dataclasses.replace(options, spill_dir=spill)
            # A short busy timeout: a locked database fails fast and is retried.
            return SqlSink(
                url,
                table=table,
                options=options,
                stats=stats,
                engine_options={"connect_args": {"timeout": 0.1}},
            )

        def begin() -> None:
            conn = sqlite3.connect(path, timeout=0, isolation_level=None)
            conn.execute("BEGIN EXCLUSIVE")
            lock.append(conn)

        def end() -> None:
            conn = lock.pop()
            conn.execute("ROLLBACK")
            conn.close()

        yield Harness(make, begin, end, stats)
        SqlSink(url, table=table).drop_table()
        return

    if backend == "redis":
        yield from _redis_harness(request, spill, stats)
        return
    if backend == "mongodb":
        yield from _mongodb_harness(spill, stats)
        return

    direct = require_server(backend)
    server = make_url(direct)
    proxy = TcpProxy(server.host or "127.0.0.1", server.port or 0)
    proxy.start()
    proxied = server.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)

    def make_proxied(options: StoreOptions) -> BufferedSink:
        options = dataclasses.replace(options, spill_dir=spill)
        return SqlSink(proxied, table=table, options=options, stats=stats)

    def end_proxy_outage() -> None:
        proxy.start()

    yield Harness(make_proxied, proxy.stop, end_proxy_outage, stats)
    proxy.stop()
    SqlSink(direct, table=table).drop_table()


def _redis_harness(
    request: pytest.FixtureRequest, spill: Path, stats: StatsCollector
) -> Iterator[Harness]:
    """The Redis item stream behind a proxy; keys under the test's own prefix."""
    redis_url: str = request.getfixturevalue("redis_server_url")
    prefix: str = request.getfixturevalue("key_prefix")
    server = urlsplit(redis_url)
    proxy = TcpProxy(server.hostname or "127.0.0.1", server.port or 6379)
    proxy.start()
    proxied = with_host_port(redis_url, "127.0.0.1", proxy.port)

    def make(options: StoreOptions) -> BufferedSink:
        options = dataclasses.replace(options, spill_dir=spill)
        return RedisStreamSink(proxied, prefix=prefix, options=options, stats=stats)

    yield Harness(make, proxy.stop, proxy.start, stats, name="stream")
    proxy.stop()


def _mongodb_harness(spill: Path, stats: StatsCollector) -> Iterator[Harness]:
    """MongoDB behind a proxy (direct connection: no replica-set discovery around it)."""
    direct = require_mongodb()
    server = urlsplit(direct)
    proxy = TcpProxy(server.hostname or "127.0.0.1", server.port or 27017)
    proxy.start()
    proxied = with_host_port(direct, "127.0.0.1", proxy.port)
    collection = unique_table("cft_items")
    # short timeouts: a store that is down fails fast and is retried
    fast = {"serverSelectionTimeoutMS": 300, "connectTimeoutMS": 300, "directConnection": True}

    def make(options: StoreOptions) -> BufferedSink:
        options = dataclasses.replace(options, spill_dir=spill)
        return MongoSink(
            proxied, collection=collection, options=options, stats=stats, client_options=fast
        )

    yield Harness(make, proxy.stop, proxy.start, stats, name="mongodb")
    proxy.stop()
    MongoSink(direct, collection=collection).drop_collection()


def test_upsert_same_key_twice_is_one_updated_row(harness: Harness) -> None:
    sink = harness.sink()
    sink.open()
    _run(sink.put(_record(1, version=1)))
    assert poll(lambda: sink.pending == 0)
    first = sink.get("key0001")
    assert first is not None and first.document["version"] == 1
    _run(sink.put(_record(1, version=2, extra="x")))
    assert _run(sink.close()) == 0
    stored = sink.get("key0001")
    assert stored is not None
    assert stored.document == {"n": 1, "version": 2, "title": "标题 1 — café", "extra": "x"}
    assert (stored.job, stored.item_type, stored.url) == (
        "job-a",
        "product",
        "https://example.com/1",
    )
    assert stored.created_at == first.created_at
    assert stored.updated_at is not None and first.updated_at is not None
    assert stored.updated_at >= first.updated_at
    assert sink.count() == 1
    assert sink.get("missing") is None


def test_same_key_twice_in_one_batch_keeps_the_last(harness: Harness) -> None:
    sink = harness.sink(batch_items=100, batch_seconds=5.0)
    sink.open()
    _run(_put_all(sink, [_record(1, version=v) for v in range(1, 6)] + [_record(2)]))
    assert _run(sink.close()) == 0
    stored = sink.get("key0001")
    assert stored is not None and stored.document["version"] == 5
    assert sink.count() == 2


def test_batches_by_size_then_by_delay(harness: Harness) -> None:
    sink = harness.sink(batch_items=50, batch_seconds=60.0)
    sink.open()
    _run(_put_all(sink, [_record(i) for i in range(120)]))
    # Two full batches go at once; the 20 left wait for the delay (60 s) or the close.
    assert poll(lambda: sink.pending == 20)
    assert harness.stats.get_value(harness.stat("batches")) == 2
    assert sink.count() == 100
    assert _run(sink.close()) == 0
    assert sink.count() == 120
    assert harness.stats.get_value(harness.stat("written")) == 120

    quick = harness.sink(batch_items=1000, batch_seconds=0.1)
    quick.open()
    _run(_put_all(quick, [_record(i, version=2) for i in range(5)]))
    assert poll(lambda: quick.pending == 0, timeout=5)
    assert quick.count() == 120
    assert _run(quick.close()) == 0


def test_store_down_and_back_loses_nothing(harness: Harness) -> None:
    sink = harness.sink()
    sink.open()
    _run(_put_all(sink, [_record(i) for i in range(30)]))
    assert poll(lambda: sink.pending == 0)
    harness.begin_outage()
    try:
        _run(_put_all(sink, [_record(i, version=2) for i in range(20, 60)]))
        assert poll(lambda: (harness.stats.get_value(harness.stat("retries")) or 0) >= 2)
        assert sink.pending == 40  # nothing written, nothing dropped
    finally:
        harness.end_outage()
    assert poll(lambda: sink.pending == 0, timeout=15)
    assert _run(sink.close()) == 0
    assert sink.count() == 60
    for i in (0, 19, 20, 59):
        stored = sink.get(f"key{i:04d}")
        assert stored is not None and stored.document["version"] == (1 if i < 20 else 2)


def test_the_recovery_line_counts_every_waiting_record_before_writing(harness: Harness) -> None:
    """'Item store ... is back after N s; writing M waiting items': M is the whole
    backlog, said before the first of them is written; the sink says it is unreachable
    meanwhile (the node watches that)."""
    said: list[tuple[str, int]] = []

    class Spy(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if " is back after " in message:
                written = harness.stats.get_value(harness.stat("written")) or 0
                said.append((message, int(written)))

    spy = Spy(logging.WARNING)
    source = logging.getLogger("crawlfleet.pipelines.buffered")
    source.addHandler(spy)
    sink = harness.sink(batch_items=10)
    try:
        sink.open()
        assert not sink.unreachable
        harness.begin_outage()
        try:
            _run(_put_all(sink, [_record(i) for i in range(45)]))
            assert poll(lambda: (harness.stats.get_value(harness.stat("retries")) or 0) >= 2)
            assert sink.unreachable and sink.pending == 45
        finally:
            harness.end_outage()
        assert poll(lambda: sink.pending == 0, timeout=15)
        assert not sink.unreachable
        assert _run(sink.close()) == 0
    finally:
        source.removeHandler(spy)
    assert len(said) == 1, said
    message, written_before = said[0]
    assert message.endswith("; writing 45 waiting items"), message
    assert written_before == 0, "said after a batch was written"
    assert sink.count() == 45


def test_full_buffer_makes_put_wait(harness: Harness) -> None:
    sink = harness.sink(batch_items=10, buffer_items=20)
    sink.open()
    harness.begin_outage()
    ended = False

    async def scenario() -> None:
        nonlocal ended
        await _put_all(sink, [_record(i) for i in range(20)])
        blocked = asyncio.ensure_future(sink.put(_record(20)))
        await asyncio.sleep(0.4)
        assert not blocked.done(), "put() must wait while the buffer is full"
        harness.end_outage()
        ended = True
        await asyncio.wait_for(blocked, 15)

    try:
        _run(scenario())
    finally:
        if not ended:
            harness.end_outage()
    assert (harness.stats.get_value(harness.stat("waits")) or 0) >= 1
    assert _run(sink.close()) == 0
    assert sink.count() == 21


def test_close_while_down_spills_and_next_open_writes(harness: Harness) -> None:
    sink = harness.sink(close_timeout_seconds=0.3)
    sink.open()
    harness.begin_outage()
    try:
        _run(_put_all(sink, [_record(i) for i in range(15)]))
        assert _run(sink.close()) == 15
    finally:
        harness.end_outage()
    assert harness.stats.get_value(harness.stat("unwritten")) == 15
    spill_dir = sink.options.spill_dir
    assert spill_dir is not None
    assert len(list(spill_dir.glob("*.jsonl"))) == 1
    with pytest.raises(RuntimeError):
        _run(sink.put(_record(99)))

    again = harness.sink()
    again.open()
    assert poll(lambda: again.pending == 0)
    assert _run(again.close()) == 0
    assert again.count() == 15
    assert harness.stats.get_value(harness.stat("replayed")) == 15
    assert list(spill_dir.glob("*.jsonl")) == []


def test_save_returns_once_the_record_is_in_the_store(harness: Harness) -> None:
    # batch_seconds is long: a save must not wait for it (group commit)
    sink = harness.sink(batch_items=50, batch_seconds=30.0)
    sink.open()

    async def scenario() -> list[StoredItem | None]:
        await asyncio.gather(*(sink.save(_record(i)) for i in range(20)))
        # read on another thread: get() blocks, as tools use it
        return await asyncio.to_thread(lambda: [sink.get(f"key{i:04d}") for i in range(20)])

    try:
        stored = asyncio.run(asyncio.wait_for(scenario(), 10))
    finally:
        _run(sink.close())
    assert all(record is not None for record in stored)


def test_save_waits_for_a_store_that_is_down(harness: Harness) -> None:
    sink = harness.sink()
    sink.open()
    harness.begin_outage()
    ended = False

    async def scenario() -> None:
        nonlocal ended
        saving = asyncio.ensure_future(sink.save(_record(1)))
        for _ in range(100):
            if (harness.stats.get_value(harness.stat("retries")) or 0) >= 1:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        assert not saving.done(), "save() must not return before the record is written"
        harness.end_outage()
        ended = True
        await asyncio.wait_for(saving, 15)

    try:
        _run(scenario())
    finally:
        if not ended:
            harness.end_outage()
    assert sink.get("key0001") is not None
    assert _run(sink.close()) == 0


def test_stopping_crawl_gives_up_saves_while_the_store_is_down(harness: Harness) -> None:
    sink = harness.sink(batch_items=10, buffer_items=20, close_timeout_seconds=0.3)
    stopping = False
    sink.stopping = lambda: stopping
    sink.open()
    harness.begin_outage()

    async def scenario() -> int:
        nonlocal stopping
        saves = [asyncio.ensure_future(sink.save(_record(i))) for i in range(25)]
        await asyncio.sleep(0.3)
        assert not any(save.done() for save in saves), "saves wait while the store is down"
        stopping = True  # e.g. Ctrl-C: the crawler is no longer crawling
        outcomes = await asyncio.wait_for(asyncio.gather(*saves, return_exceptions=True), 5)
        assert all(isinstance(o, ItemNotDurable) for o in outcomes), outcomes
        with pytest.raises(ItemNotDurable):
            await sink.save(_record(99))  # refused at once
        return await sink.close()

    try:
        assert _run(scenario()) == 0  # given up, not left over: nothing to spill
    finally:
        harness.end_outage()
    assert harness.stats.get_value(harness.stat("given_up")) == 26
    spill_dir = sink.options.spill_dir
    assert spill_dir is None or not list(spill_dir.glob("*.jsonl"))  # nothing to replay


def test_a_mark_sets_gone_at_and_keeps_the_rest(harness: Harness) -> None:
    sink = harness.sink()
    sink.open()
    _run(_put_all(sink, [_record(1), _record(2)]))
    assert poll(lambda: sink.pending == 0)
    before = sink.get("key0001")
    assert before is not None
    _run(sink.save(_mark(1)))  # durable once save returns
    marked = sink.get("key0001")
    assert marked is not None
    assert marked.document == {**before.document, "gone_at": GONE_AT}
    assert (marked.job, marked.item_type, marked.url) == (before.job, before.item_type, before.url)
    assert marked.created_at == before.created_at
    assert marked.updated_at is not None and before.updated_at is not None
    assert marked.updated_at >= before.updated_at
    other = sink.get("key0002")
    assert other is not None and "gone_at" not in other.document
    _run(sink.save(_mark(7)))  # a key not stored: nothing happens, nothing fails
    assert sink.get("key0007") is None
    assert _run(sink.close()) == 0
    assert sink.count() == 2
    assert harness.stats.get_value(harness.stat("marked")) == 2
    assert harness.stats.get_value(harness.stat("written")) == 2
    assert (harness.stats.get_value(harness.stat("rejected")) or 0) == 0


def test_marks_and_items_of_one_batch_apply_in_order(harness: Harness) -> None:
    sink = harness.sink(batch_items=100, batch_seconds=5.0)
    sink.open()
    records: list[StoredItem | ItemMark] = [
        _record(1),
        _mark(1),  # marks the item written before it in the batch
        _record(2),
        _mark(2),
        _record(2, version=2),  # a new version after the mark: no gone_at
        _mark(3),  # before its item: nothing to mark yet
        _record(3),
    ]
    _run(_put_all(sink, records))
    assert _run(sink.close()) == 0
    first, second, third = (sink.get(f"key{i:04d}") for i in (1, 2, 3))
    assert first is not None and first.document["gone_at"] == GONE_AT
    assert second is not None and second.document["version"] == 2
    assert "gone_at" not in second.document
    assert third is not None and "gone_at" not in third.document
    assert sink.count() == 3


def test_a_new_version_after_a_mark_has_no_gone_at(harness: Harness) -> None:
    sink = harness.sink()
    sink.open()
    _run(sink.save(_record(1)))
    _run(sink.save(_mark(1)))
    marked = sink.get("key0001")
    assert marked is not None and marked.document["gone_at"] == GONE_AT
    _run(sink.save(_record(1, version=2)))  # the page came back
    back = sink.get("key0001")
    assert back is not None and back.document["version"] == 2
    assert "gone_at" not in back.document
    assert _run(sink.close()) == 0


def test_a_mark_waits_for_a_store_that_is_down_and_spills_at_close(harness: Harness) -> None:
    sink = harness.sink()
    sink.open()
    _run(sink.save(_record(1)))
    harness.begin_outage()
    try:
        closing = harness.sink(close_timeout_seconds=0.3)
        closing.open()
        _run(closing.put(_mark(1)))
        assert _run(closing.close()) == 1  # still down: the mark is spilled, not lost
    finally:
        harness.end_outage()
    assert _run(sink.close()) == 0
    unmarked = sink.get("key0001")
    assert unmarked is not None and "gone_at" not in unmarked.document

    again = harness.sink()
    again.open()  # replays the spilled mark
    assert poll(lambda: again.pending == 0, timeout=15)
    assert _run(again.close()) == 0
    marked = again.get("key0001")
    assert marked is not None and marked.document["gone_at"] == GONE_AT
    assert harness.stats.get_value(harness.stat("replayed")) == 1
