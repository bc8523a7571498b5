"""A request that failed for good is acknowledged only once its failure is durable in the
error registry: the ledger's bookkeeping, a node on the in-memory frontier with a real
registry writer whose state DB is locked or down, and a real node killed (SIGKILL) while
its failures wait for a locked state DB: after a restart every failure is in the
registry, its page crawled again; never neither."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

from crawlfleet.middlewares.failures import FailureRegistry
from crawlfleet.node import leaving
from crawlfleet.node.launcher import start_node
from crawlfleet.node.ledger import Ledger
from crawlfleet.node.scheduler import Scheduler
from crawlfleet.parts import parts_of
from crawlfleet.state.db import StateDB
from crawlfleet.state.errors import list_errors
from crawlfleet.state.writer import RegistryWriter
from tests.support.failing_site import FailingSite
from tests.support.node_parts import Engine, node, run, take, until

ROOT = Path(__file__).resolve().parents[2]
SPIDER = "tests.support.failing_site:FailingSpider"
JOB = "failing"

#: the state DB does not answer: nothing listens on port 1
DOWN_DB = "postgresql+psycopg://postgres@127.0.0.1:1/crawlfleet"


# -- the ledger ----------------------------------------------------------------------
def test_the_ledger_acks_a_failed_request_only_once_its_failure_is_settled() -> None:
    ledger = Ledger(lambda: None)
    requests = [Request(f"http://a.test/{i}") for i in range(4)]
    for i, request in enumerate(requests):
        ledger.hold(str(i), "a.test")
        ledger.add_ready(request, str(i))
        ledger.take(0.0)
    assert ledger.recording(requests[0])
    assert ledger.recording(requests[1])
    assert ledger.recording(requests[2]) and ledger.recording(requests[2])  # two records
    assert not ledger.recording(Request("http://a.test/not-handed"))
    ledger.collect(set())
    # only the request without a failure is acknowledged; the others stay held
    assert ledger.acks == ["3"] and set(ledger.held) == {"0", "1", "2"}
    assert ledger.busy and set(ledger.recorded) == set(requests[:3])

    assert ledger.record_settled(requests[0], written=True)
    assert ledger.acks == ["3", "0"] and "0" not in ledger.held
    assert ledger.record_settled(requests[1], written=False)  # not written: given back
    assert ledger.release == [("1", "a.test")] and ledger.acks == ["3", "0"]
    assert not ledger.record_settled(requests[2], written=True)  # one record still waits
    assert "2" in ledger.held
    assert ledger.record_settled(requests[2], written=True)
    assert ledger.acks == ["3", "0", "2"] and not ledger.held and not ledger.recorded
    assert not ledger.record_settled(requests[2], written=True)  # late: ignored
    ledger.acks.clear()
    ledger.release.clear()
    assert not ledger.busy


def test_a_failure_settled_before_the_engine_is_done_and_one_given_back_at_close() -> None:
    ledger = Ledger(lambda: None)
    first, second = Request("http://a.test/1"), Request("http://a.test/2")
    for rid, request in (("1", first), ("2", second)):
        ledger.hold(rid, "a.test")
        ledger.add_ready(request, rid)
        ledger.take(0.0)
        assert ledger.recording(request)
    assert not ledger.record_settled(first, written=True)  # the engine still has it
    assert not ledger.record_settled(second, written=False)
    assert ledger.recording(second)
    ledger.collect(set())
    assert ledger.acks == ["1"]  # recorded, so acknowledged when done
    # the second one's first record was not written: it goes back whatever the second
    assert ledger.recorded == {second: "2"}
    third = Request("http://a.test/3")
    ledger.hold("3", "a.test")
    ledger.add_ready(third, "3")
    ledger.take(0.0)
    assert ledger.recording(third)
    ledger.collect(set())
    assert ledger.give_back_recorded() == 2
    assert sorted(ledger.release) == [("2", "a.test"), ("3", "a.test")]
    assert not ledger.held and not ledger.records and not ledger.unrecorded
    assert not ledger.record_settled(third, written=True)  # after close: ignored


# -- a node with a real writer --------------------------------------------------------
def registry_of(scheduler: Scheduler, writer: RegistryWriter) -> FailureRegistry:
    crawler = get_crawler(Spider)
    parts_of(crawler).node = scheduler
    return FailureRegistry(crawler, writer)


def migrated(path: Path) -> str:
    url = f"sqlite:///{path}"
    db = StateDB.open(url)
    try:
        db.upgrade()
    finally:
        db.close()
    return url


@contextmanager
def locked(path: Path) -> Iterator[Callable[[], None]]:
    """The SQLite file *path* locked (BEGIN EXCLUSIVE: no reader, no writer) until the
    yielded callable is called or the block ends."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=1)
    conn.execute("BEGIN EXCLUSIVE")

    def unlock() -> None:
        if conn.in_transaction:
            conn.execute("ROLLBACK")

    try:
        yield unlock
    finally:
        unlock()
        conn.close()


def test_a_failed_request_stays_leased_while_its_failure_waits_for_the_state_db(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.sqlite3"
    url = migrated(path)

    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(store, engine)  # leases of 2 s, renewed every 0.1 s
        await scheduler.start(Spider("job"))
        writer = RegistryWriter(url)
        registry = registry_of(scheduler, writer)
        for path_ in ("/ok", "/missing"):
            scheduler.enqueue_request(Request(f"http://a.test{path_}"))
        got = await take(scheduler, engine, 2)
        failed = next(r for r in got if r.url.endswith("/missing"))
        with locked(path) as unlock:
            registry.record(failed, "http", "HTTP 404", status=404)
            engine.inprogress.clear()
            counters = store["job"].counters
            await until(lambda: counters.get("acked", 0) == 1)  # /ok: at once
            await asyncio.sleep(3.0)  # past the lease's 2 s: it was renewed
            assert counters.get("acked", 0) == 1 and counters.get("requeued", 0) == 0
            assert counters["leased"] == 1 and len(scheduler.ledger.held) == 1
            assert scheduler.node_status()["failures_waiting"] == 1
            assert scheduler.has_pending_requests()  # the node does not finish meanwhile
            unlock()
            writer.flush()
            await until(lambda: counters.get("acked", 0) == 2, 15.0)
        assert counters["leased"] == 0 and not scheduler.ledger.busy
        db = StateDB.open(url)
        try:
            (row,) = list_errors(db, "job")
            assert row["url"] == "http://a.test/missing"
        finally:
            db.close()
        writer.close()
        await scheduler.stop("finished")

    asyncio.run(asyncio.wait_for(body(), 40))


def test_a_node_closing_while_the_state_db_is_down_gives_its_failed_requests_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # longer than a lease (2 s) and a node's timeout (0.3 s): the closing node renews
    monkeypatch.setattr(leaving, "CLOSE_RECORD_SECONDS", 3.0)

    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(store, engine)
        await scheduler.start(Spider("job"))
        other = node(store, Engine())  # a live node that would reclaim a lapsed lease
        await other.start(Spider("job"))
        writer = RegistryWriter(DOWN_DB)
        registry = registry_of(scheduler, writer)
        scheduler.enqueue_request(Request("http://a.test/missing"))
        (failed,) = await take(scheduler, engine, 1)
        registry.record(failed, "http", "HTTP 404", status=404)
        engine.inprogress.clear()
        await asyncio.sleep(0.5)
        counters = store["job"].counters
        assert counters.get("acked", 0) == 0 and counters["leased"] == 1
        stopping = asyncio.ensure_future(scheduler.stop("shutdown"))
        await asyncio.sleep(2.5)
        assert not stopping.done()  # waits for the writer, the lease kept alive
        assert counters.get("requeued", 0) == 0 and counters["leased"] == 1
        await stopping
        # given back, not acknowledged: the page is crawled again later
        assert counters.get("acked", 0) == 0 and counters.get("requeued", 0) == 1
        (again,) = await take(other, Engine(), 1)
        assert again.url == failed.url
        await other.stop("shutdown")
        writer.close(timeout=5)

    run(body)
    assert "1 requests whose failures could not be written to the error registry" in caplog.text


def test_a_failure_the_writer_cannot_even_queue_gives_its_request_back() -> None:
    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(store, engine)
        await scheduler.start(Spider("job"))
        writer = RegistryWriter(DOWN_DB, max_pending=0)  # full: every record dropped
        registry = registry_of(scheduler, writer)
        scheduler.enqueue_request(Request("http://a.test/missing"))
        (failed,) = await take(scheduler, engine, 1)
        registry.record(failed, "http", "HTTP 404", status=404)
        engine.inprogress.clear()
        counters = store["job"].counters
        await until(lambda: counters.get("requeued", 0) == 1)
        assert counters.get("acked", 0) == 0 and writer.dropped == 1
        await scheduler.stop("finished")
        writer.close()

    run(body)


# -- a real node, killed ----------------------------------------------------------------
@pytest.mark.slow
def test_failures_waiting_for_the_state_db_survive_a_kill(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "state.sqlite3"
    url = migrated(path)
    settings = {
        **node_env,
        "CRAWLFLEET_STATE_DB_URL": url,
        "RETRY_TIMES": 1,
        "CRAWLFLEET_HEARTBEAT_SECONDS": 0.3,
        "CRAWLFLEET_LEASE_SECONDS": 5,
        "CRAWLFLEET_NODE_TIMEOUT_SECONDS": 2,
        "CRAWLFLEET_RECLAIM_SECONDS": 0.5,
        "CRAWLFLEET_FINISH_GRACE_SECONDS": 1,
        "ROBOTSTXT_OBEY": False,
    }
    logs = [tmp_path / "node1.log", tmp_path / "node2.log"]
    failing = ("/flaky", "/missing", "/boom")
    with FailingSite() as site:

        def start(log: Path) -> Any:
            return start_node(
                SPIDER,
                job=JOB,
                redis_url=redis_server_url,
                log=log,
                spider_args={"start_urls": site.url},
                settings=settings,
                cwd=ROOT,
            )

        with locked(path) as unlock:
            first = start(logs[0])
            try:

                def waiting() -> bool:
                    # every page fetched (/flaky twice: its retry), and the node's
                    # writer found the state DB locked
                    fetched = len(site.times.get("/flaky", [])) == 2 and all(
                        len(site.times.get(p, [])) == 1 for p in ("/missing", "/boom")
                    )
                    log = logs[0].read_text() if logs[0].exists() else ""
                    return fetched and "the state DB does not answer" in log

                deadline = time.monotonic() + 90
                while not waiting():
                    assert time.monotonic() < deadline, logs[0].read_text()[-3000:]
                    time.sleep(0.2)
                # long enough for acknowledgements to reach Redis (the old race)
                time.sleep(1.5)
                # the node keeps its failed requests: the job cannot finish meanwhile
                held_on = first.poll() is None
                first.send_signal(signal.SIGKILL)
                first.wait(10)
            finally:
                if first.poll() is None:
                    first.kill()
                    first.wait(10)
            unlock()

        second = start(logs[1])
        try:
            assert second.wait(120) == 0, logs[1].read_text()[-3000:]
        finally:
            if second.poll() is None:
                second.kill()
                second.wait(10)

    db = StateDB.open(url)
    try:
        found = {e["url"].rsplit("/", 1)[1]: e for e in list_errors(db, JOB)}
    finally:
        db.close()
    # every failure is recorded (by the second node, having crawled its page again)
    assert set(found) == {p.lstrip("/") for p in failing}, logs[1].read_text()[-3000:]
    assert all(found[p.lstrip("/")]["failures"] == 1 for p in failing)
    assert len(site.times["/missing"]) == 2 and len(site.times["/boom"]) == 2
    assert len(site.times["/flaky"]) == 3  # its retry, given up at once
    assert held_on, "the first node finished its job with its failures unwritten"
    assert len(site.times["/ok"]) == 1  # only what was held was crawled again
