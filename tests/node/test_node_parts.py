"""The node's parts (scheduler, ledger, sync loop, lifecycle, seed reader) on the
in-memory frontier: no Redis, no process, no engine; each behaviour a node promises,
checked in milliseconds. The same behaviours run end to end on Redis in the crawl
tests."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.utils.request import RequestFingerprinter

from crawlfleet.exceptions import ItemNotDurable
from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.memory import MemoryFrontier
from crawlfleet.frontier.records import FINGERPRINT_BYTES, Outgoing
from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.node.heartbeat import RENEW_SHARE
from crawlfleet.node.leasing import (
    AHEAD_QUEUE_SHARE,
    LOW_SHARE_PLENTY,
    PLENTY_HOLD_SECONDS,
    PLENTY_LEASE_FACTOR,
)
from crawlfleet.node.ledger import Ledger
from crawlfleet.node.outbox import AHEAD_FLUSH_FACTOR, PLENTY_FLUSH_FACTOR
from crawlfleet.node.slots import PARSE_COST_MIN_BYTES, PARSE_COSTS_KEPT, ParseCost
from crawlfleet.parts import parts_of
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.redis.localcluster import RedisProcess
from tests.support.frontier import out, shard_down, site_in
from tests.support.node_parts import Engine, node, node_on, run, take, until


def fp_of(url: str) -> bytes:
    """The frontier's fingerprint of a GET of *url*, as a node computes it."""
    return RequestFingerprinter().fingerprint(Request(url))[:FINGERPRINT_BYTES]


def encode(request: Request) -> bytes:
    """*request* as the frontier stores it."""
    return RequestCodec(None).encode(request)


def count_beats(frontier: Any) -> list[float]:
    """The times of *frontier*'s heartbeats from now on (a list that grows)."""
    beats: list[float] = []
    heartbeat = frontier.heartbeat

    async def counted(*args: Any, **kwargs: Any) -> Any:
        beats.append(time.monotonic())
        return await heartbeat(*args, **kwargs)

    frontier.heartbeat = counted
    return beats


def test_a_request_is_acknowledged_only_once_the_engine_is_done_with_it() -> None:
    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(store, engine)
        await scheduler.start(Spider("job"))
        for i in range(3):
            assert scheduler.enqueue_request(Request(f"http://a.test/{i}"))
        assert not scheduler.enqueue_request(Request("http://a.test/0"))  # known here
        # leased work wakes the engine (Scrapy would otherwise ask again only every 5 s)
        await until(lambda: engine.wakes > 0 and scheduler.ledger.ready == 3)
        got = await take(scheduler, engine, 3)
        assert sorted(r.url for r in got) == [f"http://a.test/{i}" for i in range(3)]
        frontier = MemoryFrontier("job", store)
        await asyncio.sleep(0.1)
        assert (await frontier.counters()).get("acked", 0) == 0  # still in progress
        engine.inprogress.clear()
        await until(lambda: store["job"].counters.get("acked", 0) == 3)
        assert store["job"].counters["leased"] == 0
        await scheduler.stop("finished")

    run(body)


def test_a_page_whose_item_was_not_stored_goes_back_to_its_queue() -> None:
    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(store, engine)
        await scheduler.start(Spider("job"))
        scheduler.enqueue_request(Request("http://a.test/1"))
        (request,) = await take(scheduler, engine, 1)
        response = type("R", (), {"request": request})()
        scheduler.item_dropped({}, response, ItemNotDurable("store down"))
        engine.inprogress.clear()
        await until(lambda: store["job"].counters.get("requeued", 0) == 1)
        assert store["job"].counters.get("acked", 0) == 0
        (again,) = await take(scheduler, engine, 1)  # crawled again, not lost
        assert again.url == request.url
        await scheduler.stop("shutdown")

    run(body)


def test_pause_gives_leases_back_and_resume_takes_work_again() -> None:
    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(store, engine, {"CRAWLFLEET_PREFETCH": 4})
        await scheduler.start(Spider("job"))
        for i in range(10):
            scheduler.enqueue_request(Request(f"http://a.test/{i}"))
        await until(lambda: scheduler.ledger.ready > 0)
        frontier = MemoryFrontier("job", store)
        await frontier.send_control("*", "state", "paused")
        await until(lambda: scheduler.steering.state == "paused", 1.0)  # within a second
        assert scheduler.next_request() is None
        assert scheduler.ledger.ready == 0 and not scheduler.ledger.held
        assert store["job"].counters["queued"] == 10
        await frontier.send_control("*", "state", "running")
        got = await take(scheduler, engine, 1)
        assert got
        await scheduler.stop("finished")

    run(body)


def test_a_node_started_before_any_seed_waits_then_finishes_after_the_work() -> None:
    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(store, engine)
        await scheduler.start(Spider("job"))
        await asyncio.sleep(0.4)  # longer than the finish grace: no work yet, no finish
        assert scheduler.has_pending_requests()
        assert not scheduler.lifecycle.finished
        scheduler.enqueue_request(Request("http://a.test/seed"))
        await take(scheduler, engine, 1)
        engine.inprogress.clear()
        await until(lambda: not scheduler.has_pending_requests())
        assert scheduler.lifecycle.finished
        await scheduler.stop("finished")
        summary = json.loads(store["job"].summaries[scheduler.node_id])
        assert summary["reason"] == "finished"

    run(body)


def test_a_dead_nodes_leases_go_to_the_living() -> None:
    async def body() -> None:
        store: dict[str, Any] = {}
        dead_engine, live_engine = Engine(), Engine()
        dead = node(store, dead_engine, {"CRAWLFLEET_PREFETCH": 5})
        await dead.start(Spider("job"))
        for i in range(5):
            dead.enqueue_request(Request(f"http://a.test/{i}"))
        await take(dead, dead_engine, 5)
        assert dead.sync._task is not None
        dead.sync._task.cancel()  # killed: no heartbeat, no release, nothing
        live = node(store, live_engine)
        await live.start(Spider("job"))
        got = await take(live, live_engine, 5)
        assert sorted(r.url for r in got) == [f"http://a.test/{i}" for i in range(5)]
        assert store["job"].counters["requeued"] == 5
        live_engine.inprogress.clear()
        await until(lambda: store["job"].counters.get("acked", 0) == 5)
        await live.stop("finished")

    run(body)


def test_seeds_are_read_from_the_list_and_invalid_ones_skipped() -> None:
    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(store, engine, {"CRAWLFLEET_START_URLS_KEY": "job:start_urls"})
        frontier = MemoryFrontier("job", store)
        await frontier.push_seeds(
            "job:start_urls",
            [
                b"http://a.test/1",
                b"not a url",
                b'{"url": "http://a.test/2"}',
                b"http://",  # no host
                b"http:///path",
                b"\xff\xfe binary",
            ],
        )
        await scheduler.start(Spider("job"))
        got = await take(scheduler, engine, 2)
        assert sorted(r.url for r in got) == ["http://a.test/1", "http://a.test/2"]
        await asyncio.sleep(0.2)
        assert scheduler.next_request() is None  # nothing else was queued
        assert (await frontier.read_seeds("job:start_urls", 10, "n", 1000)).entries == []
        aside = await frontier.read_seeds("{job:start_urls}:crawlfleet:unreadable", 10, "n", 1)
        assert len(aside.entries) == 4  # set aside, not lost
        assert scheduler.stats.get("crawlfleet/seeds/invalid") == 0  # no stats collector
        await scheduler.stop("finished")

    run(body)


def test_rate_limited_requests_wait_for_their_slots() -> None:
    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(store, engine, {"CRAWLFLEET_RATE_LIMITS": {"a.test": "20/1s"}})
        await scheduler.start(Spider("job"))
        for i in range(10):
            scheduler.enqueue_request(Request(f"http://a.test/{i}"))
        sent: list[float] = []

        def more() -> bool:
            request = scheduler.next_request()
            if request is not None:
                sent.append(time.monotonic())
            return len(sent) >= 10

        await until(more, 5.0)
        # 20/s with the default margin: slots about 51 ms apart. A request sent late
        # (a busy machine) may be followed closely by the next, on time; none goes
        # before its slot, so k slots later is at least k - 1 intervals later
        gaps = [
            (j - i, sent[j] - sent[i]) for i in range(len(sent)) for j in range(i + 1, len(sent))
        ]
        assert all(took >= (k - 1) * 0.051 for k, took in gaps), sent
        assert sent[-1] - sent[0] >= 9 * 0.045, sent  # the nine slots after the first
        assert sent[-1] - sent[0] < 1.5  # slots are used (the benchmark measures how well)
        await scheduler.stop("finished")

    run(body)


#: A heartbeat period far above the 0.1 s of an idle node's frequent beats.
SLOW_BEATS = {
    "CRAWLFLEET_HEARTBEAT_SECONDS": 2,
    "CRAWLFLEET_LEASE_SECONDS": 10,
    "CRAWLFLEET_NODE_TIMEOUT_SECONDS": 10,
}


def test_an_idle_node_beats_often_only_while_nothing_is_queued() -> None:
    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(
            store, engine, {**SLOW_BEATS, "CRAWLFLEET_RATE_LIMITS": {"a.test": "1/3s"}}
        )
        frontier = scheduler.frontier
        beats = count_beats(frontier)
        await scheduler.start(Spider("job"))
        scheduler.enqueue_request(Request("http://a.test/1"))
        scheduler.enqueue_request(Request("http://a.test/2"))
        await take(scheduler, engine, 1)
        engine.inprogress.clear()  # done: idle, the other request waits 3 s for its slot
        await until(lambda: not scheduler.ledger.busy and scheduler.sync.leaser.job_queued == 1)
        beats.clear()
        await asyncio.sleep(1.0)
        assert len(beats) <= 1, beats  # CRAWLFLEET_HEARTBEAT_SECONDS, not ten a second
        await take(scheduler, engine, 1)
        engine.inprogress.clear()  # the last page: nothing queued, the end is seen soon
        ended = time.monotonic()
        await until(lambda: not scheduler.has_pending_requests(), 2.0)
        assert time.monotonic() - ended < 1.0
        await scheduler.stop("finished")

    run(body)


def test_an_idle_node_of_a_job_whose_work_waits_for_later_beats_at_its_period() -> None:
    """Nothing queued, but a request waits for its time (a tracked page between visits,
    hours away): the job is not ending, the node beats every CRAWLFLEET_HEARTBEAT_SECONDS,
    not ten times a second for hours."""

    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(store, engine, SLOW_BEATS)
        frontier = scheduler.frontier
        later = Outgoing(b"", "a.test", 0, encode(Request("http://a.test/later")), 3_600_000)
        await MemoryFrontier("job", store).commit("n0", [later])
        beats = count_beats(frontier)
        await scheduler.start(Spider("job"))
        await until(lambda: scheduler.sync.heartbeat.state is not None)
        beats.clear()
        await asyncio.sleep(1.0)
        assert len(beats) <= 1, beats
        assert scheduler.has_pending_requests()  # not finished: it waits for its time
        await scheduler.stop("finished")

    run(body)


def test_the_frequent_beats_of_an_idle_node_publish_its_status_about_once_a_second() -> None:
    async def body() -> None:
        store: dict[str, Any] = {}
        scheduler = node(store, Engine(), SLOW_BEATS)
        heartbeat = scheduler.sync.heartbeat
        beats: list[str] = []
        built: list[float] = []
        beat, status = heartbeat.core.frontier.heartbeat, heartbeat.status

        async def counted(*args: Any, **kwargs: Any) -> Any:
            beats.append(kwargs["status"])
            return await beat(*args, **kwargs)

        def building() -> dict[str, Any]:
            built.append(time.monotonic())
            return status()

        heartbeat.core.frontier.heartbeat = counted  # type: ignore[method-assign]
        heartbeat.status = building
        await scheduler.start(Spider("job"))  # no seed: idle, nothing queued
        await asyncio.sleep(0.8)
        assert len(beats) >= 5  # every 0.1 s: it sees the first seed at once
        assert len(built) <= 2, built
        assert all(json.loads(each)["node"] == scheduler.node_id for each in beats)
        await scheduler.stop("shutdown")

    run(body)


def test_the_ledger_gives_back_slots_missed_and_keeps_one_place_per_request() -> None:
    async def body() -> None:
        ledger = Ledger(lambda: None)
        requests = [Request(f"http://a.test/{i}") for i in range(3)]
        for i in range(len(requests)):
            ledger.hold(str(i), "a.test")
        now = asyncio.get_running_loop().time()
        ledger.add_slotted(now - 1.0, 0.01, requests[0], "0")  # long missed
        ledger.add_slotted(now - 0.001, 0.5, requests[1], "1")  # due
        ledger.add_ready(requests[2], "2")
        leased, late = ledger.take(now)
        assert leased == (requests[1], "1") and late == 1
        assert ledger.release == [("0", "a.test")] and "0" not in ledger.held
        assert ledger.take(now)[0] == (requests[2], "2")
        assert ledger.collect({requests[2]}) == 0
        assert ledger.acks == ["1"] and set(ledger.held) == {"2"}
        ledger.mark_unstored(requests[2])
        assert ledger.collect(set()) == 1
        assert ledger.release[-1] == ("2", "a.test") and not ledger.held

    run(body)


@pytest.mark.parametrize("state", ["draining", "stopped"])
def test_drain_and_stop_close_the_node(state: str) -> None:
    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(store, engine)
        await scheduler.start(Spider("job"))
        scheduler.enqueue_request(Request("http://a.test/1"))
        await take(scheduler, engine, 1)
        await MemoryFrontier("job", store).send_control("*", "state", state)
        if state == "draining":
            await asyncio.sleep(0.3)
            assert engine.closed == []  # a request in progress: not yet
            engine.inprogress.clear()
        await until(lambda: engine.closed == ["drained" if state == "draining" else "stopped"])
        await scheduler.stop(engine.closed[0])

    run(body)


class DistantFrontier(MemoryFrontier):
    """The in-memory frontier behind a 50-ms round trip (25 ms each way), as a Redis in
    another region."""

    leases = 0

    async def lease(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.025)
        result = await super().lease(*args, **kwargs)
        self.leases += 1
        await asyncio.sleep(0.025)
        return result


def test_a_node_50_ms_from_redis_sends_every_slot_on_time() -> None:
    """A slot may be sent 7.5 ms late at 20/1s. Placed a round trip late (never early),
    every slot of a node 5 ms or more from Redis was missed and given back, and the site
    never crawled; placed at the middle of the round trip, and leased a reply's way
    ahead, every slot is used."""

    async def body() -> None:
        frontier = DistantFrontier("job", {})
        engine = Engine()
        scheduler = node_on(frontier, engine, {"CRAWLFLEET_RATE_LIMITS": {"a.test": "20/1s"}})
        await scheduler.start(Spider("job"))
        for i in range(12):
            scheduler.enqueue_request(Request(f"http://a.test/{i}"))
        got = await take(scheduler, engine, 12)
        assert frontier.leases >= 2
        assert len({r.url for r in got}) == 12
        assert scheduler.stats.get("crawlfleet/scheduler/late") == 0
        assert 0.025 <= scheduler.sync.leaser.lead() < 0.1
        await scheduler.stop("finished")

    run(body)


class SlowReplies(MemoryFrontier):
    """The in-memory frontier whose lease replies, after the first, come 30 ms after the
    lease was made: a node that had no core for a moment when its reply arrived."""

    leases = 0

    async def lease(self, *args: Any, **kwargs: Any) -> Any:
        result = await super().lease(*args, **kwargs)
        self.leases += 1
        if self.leases > 1:
            await asyncio.sleep(0.03)
        return result


def test_slots_of_a_slow_lease_reply_are_used_not_given_back() -> None:
    """A slot may be sent 7.5 ms late at 20/1s. Counted from its reply alone, a lease
    whose reply took 30 ms had every slot missed and given back, however far ahead;
    the clock learned from a quick lease before places them within 1 ms."""

    async def body() -> None:
        frontier = SlowReplies("job", {})
        engine = Engine()
        scheduler = node_on(frontier, engine, {"CRAWLFLEET_RATE_LIMITS": {"a.test": "20/1s"}})
        await scheduler.start(Spider("job"))
        for i in range(12):
            scheduler.enqueue_request(Request(f"http://a.test/{i}"))
        got = await take(scheduler, engine, 12)
        assert frontier.leases > 2  # slots came in slow replies too
        assert len({r.url for r in got}) == 12
        assert scheduler.stats.get("crawlfleet/scheduler/late") == 0
        await scheduler.stop("finished")

    run(body)


@pytest.mark.parametrize("cache", [200_000, 0])
def test_repeated_links_are_duplicates_counted_in_the_job_with_or_without_the_cache(
    cache: int,
) -> None:
    """With the seen cache, a link this node sent (or Redis answered "seen" for) is a
    duplicate without asking the frontier again; the job's figures count it all the
    same. Without it, every link is checked in the frontier."""

    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(store, engine, {"CRAWLFLEET_SEEN_CACHE_SIZE": cache})
        await scheduler.start(Spider("job"))
        other = MemoryFrontier("job", store)
        nav = Request("http://a.test/nav")
        await other.commit("other", [Outgoing(fp_of(nav.url), "a.test", 0, encode(nav))])
        for _ in range(3):  # a navigation link on three pages
            scheduler.enqueue_request(Request("http://a.test/nav"))
            scheduler.enqueue_request(Request("http://a.test/1"))
            await until(lambda: not scheduler.ledger.unsent)
        counters = store["job"].counters
        assert (counters["enqueued"], counters["duplicates"]) == (2, 5)
        seen = scheduler.ledger.seen
        assert (seen.lookups, seen.hits) == ((6, 4) if cache else (0, 0))
        await scheduler.stop("shutdown")

    run(body)


def test_a_node_knows_the_links_other_nodes_queued_from_the_jobs_feed() -> None:
    """A link another node queued comes to this node's cache with its next commit (the
    job's feed): met later, it is a duplicate without asking the frontier, counted in
    the job's figures all the same."""

    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(store, engine)
        await scheduler.start(Spider("job"))
        other = MemoryFrontier("job", store)
        nav = Request("http://a.test/nav")
        await other.commit("other", [Outgoing(fp_of(nav.url), "a.test", 0, encode(nav))], feed=0)
        scheduler.enqueue_request(Request("http://a.test/1"))  # its commit reads the feed
        await until(lambda: not scheduler.ledger.unsent)
        seen = scheduler.ledger.seen
        assert fp_of(nav.url) in seen and seen.place == 2
        assert not scheduler.enqueue_request(Request("http://a.test/nav"))  # known here
        scheduler.enqueue_request(Request("http://a.test/2"))
        await until(lambda: not scheduler.ledger.unsent)
        counters = store["job"].counters
        assert (counters["enqueued"], counters["duplicates"]) == (3, 1)
        await scheduler.stop("shutdown")

    run(body)


def test_a_node_that_lives_through_a_reset_forgets_what_it_knew_was_seen() -> None:
    """A forced reset empties the seen-filter under a live node: a link its cache knew
    is sent again (and queued in the new epoch of the job), not dropped as seen."""

    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(store, engine)
        await scheduler.start(Spider("job"))
        assert scheduler.enqueue_request(Request("http://a.test/nav"))
        await until(lambda: store["job"].counters.get("enqueued", 0) == 1)
        await MemoryFrontier("job", store).reset(keep_nodes=True)
        assert not scheduler.enqueue_request(Request("http://a.test/nav"))  # known here
        await until(lambda: store["job"].counters.get("enqueued", 0) == 1)
        assert store["job"].counters.get("duplicates", 0) == 0
        (again,) = await take(scheduler, engine, 1)
        assert again.url == "http://a.test/nav"
        await scheduler.stop("shutdown")

    run(body)


def test_a_known_duplicate_is_dropped_where_the_spider_yields_it_as_the_scheduler_would() -> None:
    """Scheduler.drop_known (asked by the KnownDuplicates spider middleware): a request
    whose fingerprint the seen cache holds, counted with the next commit as the
    scheduler counts one; never one that skips the filter, nor a start request, nor any
    while a slot is due (GiveWay pauses the output for it, further on); a new one is
    looked up once in all. After a reset, what it dropped is not sent again (it did not
    pass the spider middlewares: its depth was never set), what the scheduler dropped is."""

    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(store, engine)
        await scheduler.start(Spider("job"))
        seen = scheduler.ledger.seen
        assert not scheduler.drop_known(Request("http://a.test/nav"))  # not known yet
        assert scheduler.enqueue_request(Request("http://a.test/nav"))
        assert (seen.lookups, seen.hits) == (1, 0)  # the miss counted once, not twice
        assert scheduler.drop_known(Request("http://a.test/nav"))
        assert not scheduler.drop_known(Request("http://a.test/nav", dont_filter=True))
        start = Request("http://a.test/nav", meta={"is_start_request": True})
        assert not scheduler.drop_known(start)
        slot = asyncio.get_running_loop().time() + 0.01  # due within GIVE_WAY_SECONDS
        scheduler.ledger.add_slotted(slot, 0.05, Request("http://b.test/"), "rid-b")
        assert scheduler.give_way() is not None
        assert not scheduler.drop_known(Request("http://a.test/nav"))
        scheduler.ledger.slotted.drain()
        assert scheduler.give_way() is None
        assert scheduler.drop_known(Request("http://a.test/nav"))
        assert (seen.lookups, seen.hits) == (3, 2)
        await until(lambda: store["job"].counters.get("duplicates", 0) == 2)
        assert scheduler.ledger.known == [] and not scheduler.ledger.known_early
        await MemoryFrontier("job", store).reset(keep_nodes=True)
        assert scheduler.drop_known(Request("http://a.test/nav", meta={"via": "early"}))
        assert not scheduler.enqueue_request(Request("http://a.test/nav", meta={"via": "late"}))
        # the first, leased before the reset, and the one the scheduler dropped; not the
        # one dropped early
        got = await take(scheduler, engine, 2)
        assert sorted(str(r.meta.get("via")) for r in got) == ["None", "late"]
        await asyncio.sleep(0.3)
        assert scheduler.next_request() is None
        assert store["job"].counters.get("enqueued", 0) == 1  # the late one, in the new epoch
        await scheduler.stop("shutdown")

    run(body)


@dataclass
class StoreDown:
    """An item store that is down with *pending* items waiting for it."""

    pending: int
    target: str = "a store"
    unreachable: bool = True


def test_a_slowed_node_leases_and_commits_in_batches_while_the_job_has_plenty() -> None:
    """Redis's cost is mostly per call: a node whose feedback cut it to 2 requests at a
    time still leases its configured prefetch at once, when a quarter of it is left, and
    keeps its new links for its next lease (PLENTY_FLUSH_FACTOR times the flush
    interval), while the job has a prefetch queued for every node; not when it runs
    short, nor while its work is paced. With AHEAD_QUEUE_SHARE times its ahead target
    queued for every node and no pacing, it leases what it starts in the next seconds
    (at most PLENTY_LEASE_FACTOR prefetches), and its links wait AHEAD_FLUSH_FACTOR
    times the interval (not while it waits for its item stores: no lease is coming); near
    the queue's end, its prefetch only (no hoard to wait on)."""
    scheduler = node({}, Engine(), {"CONCURRENT_REQUESTS": 16})
    leaser, outbox, ledger = scheduler.sync.leaser, scheduler.sync.outbox, scheduler.ledger
    flush = scheduler.config.flush_seconds
    leaser.job_queued, leaser.live_nodes = 10_000, 2
    assert not leaser.ahead() and leaser.wanted() == 16  # its pace not known yet
    leaser.pace = 10.0  # what it starts in PLENTY_HOLD_SECONDS
    assert leaser.ahead() and leaser.wanted() == round(10 * PLENTY_HOLD_SECONDS)
    leaser.pace = 1000.0  # at most PLENTY_LEASE_FACTOR prefetches
    assert leaser.wanted() == PLENTY_LEASE_FACTOR * 16
    ledger.add_out(Request("http://a.test/"), b"f" * 16, b"payload")
    for i in range(10):  # work in hand
        ledger.add_ready(Request(f"http://a.test/{i}"), str(i))
    outbox.last_flush = 0.0
    assert not outbox.due(flush * AHEAD_FLUSH_FACTOR - 0.01)
    assert outbox.due(flush * AHEAD_FLUSH_FACTOR)
    # waiting for its item stores it leases nothing: its acknowledgements go on time
    store = StoreDown(pending=scheduler.sync.backlog.limit)
    scheduler.sync.backlog.stores.append(store)
    assert not leaser.leases_soon() and outbox.due(flush)
    scheduler.sync.backlog.stores.remove(store)
    ledger.drain_ready()
    ahead = AHEAD_QUEUE_SHARE * PLENTY_LEASE_FACTOR * 16 * 2
    leaser.job_queued = ahead - 1  # the queue's end comes near: its prefetch only
    assert not leaser.ahead() and leaser.wanted() == 16
    leaser.pace = 0.0
    scheduler.steering.set_feedback(2)
    assert scheduler.steering.prefetch == 2
    leaser.job_queued = 31  # short of 16 for each of 2 nodes
    assert leaser.wanted() == 2 and outbox.due(0.0)
    leaser.job_queued = 32
    assert leaser.wanted() == 16
    for i in range(16 // LOW_SHARE_PLENTY + 1):
        ledger.add_ready(Request(f"http://a.test/{i}"), str(i))
    assert not leaser.low() and leaser.wanted() == 16 - (16 // LOW_SHARE_PLENTY + 1)
    ledger.drain_ready()
    for i in range(2):  # still something in hand
        ledger.add_ready(Request(f"http://a.test/{i}"), str(i))
    assert leaser.low()
    leaser.paced = True  # slots of a rate-limited site: half its (cut) prefetch
    assert not leaser.low()
    leaser.job_queued, leaser.pace = 10_000, 1000.0  # paced: never ahead
    assert not leaser.ahead() and leaser.wanted() == 16 - 2
    leaser.job_queued = 32
    outbox.last_flush = 0.0
    assert not outbox.due(flush * PLENTY_FLUSH_FACTOR - 0.01)
    assert outbox.due(flush * PLENTY_FLUSH_FACTOR)
    leaser.job_queued = 31
    assert outbox.due(flush)  # short of work: CRAWLFLEET_FLUSH_SECONDS


def test_a_node_measures_its_pace_between_leases_and_leases_seconds_of_it() -> None:
    """The pace a node leases for (with plenty queued) is what its engine took from the
    ready requests between two leases, a second: an engine that takes 40 a second has
    the node lease what it starts in PLENTY_HOLD_SECONDS, within PLENTY_LEASE_FACTOR
    prefetches."""

    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(store, engine, {"CONCURRENT_REQUESTS": 16})
        frontier = MemoryFrontier("job", store)
        urls = [f"http://a.test/{i}" for i in range(400)]
        await frontier.commit(
            "seeder", [Outgoing(fp_of(u), "a.test", 0, encode(Request(u))) for u in urls]
        )
        await scheduler.start(Spider("job"))
        leaser = scheduler.sync.leaser
        await until(lambda: scheduler.ledger.ready >= 16)
        assert leaser.pace == 0.0  # one lease: nothing measured yet
        for _ in range(40):  # the engine takes one request every 25 ms: 40 a second
            await take(scheduler, engine, 1)
            await asyncio.sleep(0.025)
        engine.inprogress.clear()
        assert 10 < leaser.pace < 60  # at most 40 a second, less on a loaded machine
        leaser.job_queued, leaser.live_nodes = 10_000, 1
        target = leaser.ahead_target()
        assert target == max(
            16, min(PLENTY_LEASE_FACTOR * 16, round(leaser.pace * PLENTY_HOLD_SECONDS))
        )
        assert leaser.wanted() == target - scheduler.ledger.ready
        await scheduler.stop("shutdown")

    run(body)


async def node_with_a_lease(store: dict[str, Any]) -> tuple[Any, Any]:
    """A node (leases of 30 s, heartbeats every 2 s) on the in-memory frontier of
    *store*, and a lease of one request made to it (1 s long), not yet held."""
    frontier = MemoryFrontier("job", store)
    settings = {
        "CRAWLFLEET_LEASE_SECONDS": 30,
        "CRAWLFLEET_HEARTBEAT_SECONDS": 2,
        "CRAWLFLEET_NODE_TIMEOUT_SECONDS": 10,
    }
    scheduler = node_on(frontier, Engine(), settings)
    await frontier.commit("other", [out("http://a.test/")])
    leased = await frontier.lease(
        scheduler.node_id, 1, ["a"], lease_ms=1000, per_site=1, offer_size=10
    )
    (entry,) = leased.entries
    return scheduler, entry


def test_leases_are_renewed_a_third_of_their_time_apart_not_at_every_heartbeat() -> None:
    """A heartbeat renews the node's leases only once RENEW_SHARE of the lease's time,
    less a heartbeat period, has passed since the last renewal that got through: each
    lease is renewed with at least two thirds of its time left, and most heartbeats cost
    Redis nothing per lease."""

    async def body() -> None:
        store: dict[str, Any] = {}
        scheduler, entry = await node_with_a_lease(store)
        scheduler.ledger.hold(entry.rid, entry.site)
        heartbeat, leases = scheduler.sync.heartbeat, store["job"].leases
        await heartbeat.beat()  # the first renews
        assert leases[entry.rid] > time.time() * 1000 + 20_000
        leases[entry.rid] = 1  # a mark: what the next heartbeats do to it
        await heartbeat.beat()
        assert leases[entry.rid] == 1
        # as if the time had passed (30 s x RENEW_SHARE, less a 2-s heartbeat period)
        heartbeat._renewed_at -= 30 * RENEW_SHARE - 2
        await heartbeat.beat()
        assert leases[entry.rid] > time.time() * 1000 + 20_000

    run(body)


def test_a_finished_lease_is_renewed_until_its_acknowledgement_leaves() -> None:
    """A page's acknowledgement goes with the node's last batch of new requests: with
    plenty of links to send, it waits behind them. Its lease is renewed meanwhile (a
    live node's lease must never lapse: it did, and the page was fetched again)."""

    async def body() -> None:
        store: dict[str, Any] = {}
        scheduler, entry = await node_with_a_lease(store)
        ledger = scheduler.ledger
        ledger.hold(entry.rid, entry.site)
        ledger.add_ready(Request("http://a.test/"), entry.rid)
        assert ledger.take(0.0)[0] is not None
        ledger.collect(inprogress=())  # finished: its acknowledgement waits to be sent
        assert entry.rid not in ledger.held and ledger.acks == [entry.rid]
        await scheduler.sync.heartbeat.beat()  # the first heartbeat renews
        assert store["job"].leases[entry.rid] > time.time() * 1000 + 20_000

    run(body)


def test_a_retried_start_request_is_queued_again_not_dropped_as_seen() -> None:
    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(store, engine)
        await scheduler.start(Spider("job"))
        start = Request("http://a.test/", meta={"is_start_request": True})
        assert scheduler.enqueue_request(start)
        (taken,) = await take(scheduler, engine, 1)
        # what Scrapy's RetryMiddleware makes of a start request that timed out
        retry = taken.replace(dont_filter=True)
        retry.meta["retry_times"] = 1
        assert scheduler.enqueue_request(retry)
        engine.inprogress.discard(taken)
        (again,) = await take(scheduler, engine, 1)
        assert again.url == "http://a.test/" and again.meta["retry_times"] == 1
        await scheduler.stop("finished")

    run(body)


def test_an_item_a_store_gave_up_is_not_a_failure_but_a_dropped_one_is(tmp_path: Any) -> None:
    from scrapy.exceptions import DropItem
    from scrapy.http import HtmlResponse
    from scrapy.utils.test import get_crawler

    from crawlfleet.exceptions import ItemNotDurable
    from crawlfleet.middlewares.failures import FailureRegistry
    from crawlfleet.state.writer import RegistryWriter

    async def body() -> None:
        scheduler = node({}, Engine())
        await scheduler.start(Spider("job"))
        crawler = get_crawler(Spider)
        parts_of(crawler).node = scheduler
        writer = RegistryWriter(f"sqlite:///{tmp_path / 'state.sqlite3'}")
        registry = FailureRegistry(crawler, writer)
        request = Request("http://a.test/p")
        response = HtmlResponse(request.url, body=b"<html></html>", request=request)
        registry.item_dropped({}, response, ItemNotDurable("store down"), Spider("job"))
        assert writer._thread is None  # nothing to write: the writer never started
        registry.item_dropped({}, response, DropItem("price missing"), Spider("job"))
        writer.close()
        assert writer.written == 1
        await scheduler.stop("finished")

    run(body)


def test_a_commit_done_in_part_is_finished_without_queueing_anything_twice(
    redis_server_url: str, key_prefix: str
) -> None:
    """A job of three shards, one of them down when a node commits a link to it and a
    retry that bypasses the seen-filter to another: the node keeps the link and sends
    it again once the shard is back, and the retry is queued once."""
    link_site, retry_site = site_in(1, 3, "link"), site_in(2, 3, "retry")

    async def body() -> None:
        client = make_client(redis_server_url)
        keys = JobKeys.of(key_prefix, "job")
        frontier = JobFrontier(client, keys, shards=3)
        engine = Engine()
        scheduler = node_on(frontier, engine)
        await scheduler.start(Spider("job"))
        down = shard_down(frontier, 1)
        try:
            scheduler.enqueue_request(Request(f"http://{link_site}/"))
            scheduler.enqueue_request(Request(f"http://{retry_site}/", dont_filter=True))
            reader = JobFrontier(client, keys)

            async def enqueued() -> int:
                return (await reader.counters()).get("enqueued", 0)

            deadline = time.monotonic() + 5
            while await enqueued() < 1:  # the shard that answers took its part
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)  # the node tries again (and fails) meanwhile
            assert await enqueued() == 1 and len(scheduler.ledger.out) == 1
            assert frontier._parts is not None
            frontier._parts[1] = Frontier(client, keys.in_shard(1, 3), frontier.home.seen)
            while await enqueued() < 2:  # the shard is back: the rest goes
                assert time.monotonic() < deadline + 10
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)
            assert await enqueued() == 2 and not scheduler.ledger.out
            await scheduler.stop("shutdown")
        finally:
            await down.aclose()
            await client.aclose()

    run(body)


def test_a_leased_entry_without_separators_is_set_aside_saying_so(
    redis_server_url: str, key_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A queued item that lost its separators: the node that leases it logs its key and
    what is wrong (not "unknown format version b''"), sets it aside, goes on."""

    async def body() -> None:
        client = make_client(redis_server_url)
        keys = JobKeys.of(key_prefix, "job")
        frontier = Frontier(client, keys)
        await frontier.commit("seed", [])
        await client.rpush(keys.fifo("a.test"), b"no separator at all")
        await client.zadd(keys.sites, {"a.test": 0})
        await client.hset(keys.counters, "queued", 1)
        engine = Engine()
        scheduler = node_on(frontier, engine)
        await scheduler.start(Spider("job"))
        try:
            await until(lambda: "set aside" in caplog.text)
            deadline = time.monotonic() + 3
            while await client.llen(keys.bad) < 1:  # the next commit moves it
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            await scheduler.stop("shutdown")
        finally:
            await client.aclose()

    with caplog.at_level("ERROR", logger="crawlfleet.node.leasing"):
        run(body)
    said = [r.getMessage() for r in caplog.records if "set aside" in r.getMessage()]
    assert len(said) == 1, said
    assert f"in {JobKeys.of(key_prefix, 'job').req} set aside (job job)" in said[0]
    assert "no separator" in said[0] and "format version" not in said[0]


def test_the_end_of_a_redis_hang_counts_from_its_start(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis hangs (SIGSTOP) for 4 s under a node whose calls time out after 1 s: the
    line that says Redis is back counts the whole stall, not from when the first call
    timed out (which would say about 3 s or less)."""
    server = RedisProcess(tmp_path / "redis", persist=False)
    server.start()

    async def body() -> None:
        client = make_client(server.url, socket_timeout=1, socket_connect_timeout=1)
        engine = Engine()
        scheduler = node_on(
            JobFrontier(client, JobKeys.of("cf", "job")),
            engine,
            {"CRAWLFLEET_REDIS_RETRY_MAX_SECONDS": 0.5},
        )
        await scheduler.start(Spider("job"))
        try:
            await asyncio.sleep(0.3)
            server.freeze()
            await asyncio.sleep(4)
            server.thaw()
            await until(lambda: "reachable again" in caplog.text, 10)
            await scheduler.stop("shutdown")
        finally:
            await client.aclose()

    try:
        with caplog.at_level("WARNING", logger="crawlfleet.outage"):
            run(body)
    finally:
        server.close()
    said = [r.getMessage() for r in caplog.records if "reachable again" in r.getMessage()]
    assert len(said) == 1, said
    seconds = float(said[0].split("reachable again after ")[1].split("s")[0])
    assert 3.6 <= seconds < 6, said[0]


def test_a_node_sends_what_it_finished_with_its_next_lease_in_one_call(
    redis_server_url: str, key_prefix: str
) -> None:
    """A round in one call: the pages a node finished are acknowledged, and the links
    they yielded queued, by the call that leases its next requests (commit_lease), and
    no page is lost or leased twice on the way."""

    async def body() -> None:
        client = make_client(redis_server_url)
        frontier = JobFrontier(client, JobKeys.of(key_prefix, "job"))
        calls: list[str] = []
        for name in ("commit", "lease", "commit_lease"):
            method = getattr(frontier, name)

            async def counted(*args: Any, _m: Any = method, _n: str = name, **kw: Any) -> Any:
                calls.append(_n)
                return await _m(*args, **kw)

            setattr(frontier, name, counted)
        engine = Engine()
        scheduler = node_on(frontier, engine, {"CRAWLFLEET_PREFETCH": 2})
        try:
            await scheduler.start(Spider("job"))
            for i in range(8):  # more queued than the node holds: it knows its offer
                scheduler.enqueue_request(Request(f"http://a.test/{i}"))
            seen: list[str] = []
            for step in range(8, 14):
                got = await take(scheduler, engine, 1)
                seen += [r.url for r in got]
                # the page yields a link, and the engine is done with it
                scheduler.enqueue_request(Request(f"http://a.test/{step}"))
                engine.inprogress.clear()
            assert "commit_lease" in calls
            await until(lambda: scheduler.ledger.acks == [] and not scheduler.ledger.out, 5.0)
            counters = await frontier.counters()
            assert len(seen) == len(set(seen)) == 6  # none leased twice
            assert counters["enqueued"] == 14 and counters["acked"] == 6
            assert counters["queued"] + counters["leased"] == 8  # none lost
        finally:
            await scheduler.stop("shutdown")
            await client.aclose()

    run(body)


async def holding_slots(limit: str) -> Any:
    """A started node of a site limited to *limit*, with 4 requests queued: the first
    taken on its slot (now), two or more held for theirs."""
    scheduler = node({}, Engine(), {"CRAWLFLEET_RATE_LIMITS": {"a.test": limit}})
    await scheduler.start(Spider("job"))
    for i in range(4):
        scheduler.enqueue_request(Request(f"http://a.test/{i}"))
    await until(lambda: scheduler.next_request() is not None)  # the first slot: now
    await until(lambda: len(scheduler.ledger.slotted) >= 2)
    return scheduler


def test_the_parse_cost_is_learned_from_large_pages_per_byte() -> None:
    cost = ParseCost()
    assert cost.estimate(100_000) is None  # nothing learned yet
    cost.record(PARSE_COST_MIN_BYTES - 1, 5.0)  # a small page teaches nothing
    assert cost.estimate(100_000) is None
    cost.record(100_000, 0.02)
    cost.record(200_000, 0.1)  # the costliest page of the last ones sets the estimate
    assert cost.estimate(1_000_000) == pytest.approx(0.5)
    for _ in range(PARSE_COSTS_KEPT):
        cost.record(100_000, 0.01)
    assert cost.estimate(1_000_000) == pytest.approx(0.1)  # the costly one was forgotten


@pytest.mark.timing
def test_a_large_pages_parse_waits_for_a_gap_between_slots_and_leaves_new_ones_to_others() -> None:
    """A page the node's pages say will block the loop for 150 ms is held until after
    the slots it would overlap (10/s: 102.5 ms apart), and the node leases nothing until
    its parse should be over; a small page's parse fits before the next slot."""

    async def body() -> None:
        scheduler = await holding_slots("10/1s")
        slotted = scheduler.ledger.slotted
        scheduler.parsed(100_000, 0.15)  # 1.5 µs a byte
        loop = asyncio.get_running_loop()
        times = slotted.times()
        now = loop.time()
        assert times[0] - now > 0.03  # the next slot is at least 30 ms away
        leaser = scheduler.sync.leaser
        next_lease = leaser.next_at
        assert scheduler.parse_hold(10_000) == 0.0  # 15 ms: parsed before the slot
        assert leaser.next_at == next_lease  # leasing goes on as it would
        hold = scheduler.parse_hold(100_000)
        now = loop.time()
        # held until just after the last slot it would overlap (here every one: 102.5
        # ms apart, closer than its 150 ms), no later
        assert now + hold >= times[-1] and hold <= times[-1] - now + 0.01, (hold, times)
        assert leaser.next_at >= now + hold + 0.149  # no lease meanwhile
        await scheduler.stop("finished")

    run(body)


@pytest.mark.timing
def test_a_response_is_held_while_a_slot_comes_due_within_the_loops_blocks() -> None:
    """Parsing a large page blocks the loop: a slot due meanwhile is missed. Once the node
    has seen its loop blocked when a slot came due, a response is held back (its parse
    waits) while a slot is due within that time, until just after it."""

    async def body() -> None:
        scheduler = await holding_slots("5/1s")
        slotted = scheduler.ledger.slotted
        assert scheduler.parse_hold() == 0.0  # the loop was never seen blocked
        at = slotted.next_at()
        assert at is not None
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, at - loop.time() - 0.01))
        time.sleep(0.06)  # a parse of 60 ms runs over the slot
        await until(lambda: slotted.blocked() >= 0.04)  # the timer fired 40-60 ms late
        await until(lambda: scheduler.next_request() is not None, 1.0)  # (late allowance)
        # the next slot is about 205 ms away: a response may be parsed now
        assert scheduler.parse_hold() == 0.0
        following = slotted.next_at()
        assert following is not None
        await asyncio.sleep(max(0.0, following - loop.time() - 0.03))
        # 30 ms before the slot, the loop lately blocked for 40 ms or more: held until
        # just after it
        hold = scheduler.parse_hold()
        assert 0.02 <= hold <= 0.04, hold
        assert loop.time() + hold > following
        await scheduler.stop("finished")

    run(body)


class CountingFrontier(MemoryFrontier):
    """The in-memory frontier, counting the leases that found only sites not ready."""

    not_ready = 0

    async def lease(self, *args: Any, **kwargs: Any) -> Any:
        result = await super().lease(*args, **kwargs)
        if not result.entries and result.ready_in_us >= 0:
            CountingFrontier.not_ready += 1
        return result


def test_nodes_on_one_budget_come_back_for_slots_once_several_are_ready() -> None:
    """Two nodes crawl one rate-limited site: a node whose lease finds the next slot not
    ready yet comes back a while after it is (PACED_GATHER_SECONDS), not the moment it
    is, to race the other node for that one slot again; the site gets its rate."""

    async def body() -> None:
        store: dict[str, Any] = {}
        engines = [Engine(), Engine()]
        CountingFrontier.not_ready = 0
        nodes = [
            node_on(
                CountingFrontier("job", store), e, {"CRAWLFLEET_RATE_LIMITS": {"a.test": "20/1s"}}
            )
            for e in engines
        ]
        urls = [f"http://a.test/{i}" for i in range(200)]
        await MemoryFrontier("job", store).commit(
            "seeder", [Outgoing(fp_of(u), "a.test", 0, encode(Request(u))) for u in urls]
        )
        for scheduler in nodes:
            await scheduler.start(Spider("job"))
        sent: list[float] = []
        started = time.monotonic()
        while time.monotonic() < started + 2.0:  # two engines: each download takes 10 ms
            for scheduler, engine in zip(nodes, engines, strict=True):
                request = scheduler.next_request()
                if request is not None:
                    sent.append(time.monotonic())
                    engine.inprogress.add(request)
                    later = asyncio.get_running_loop().call_later
                    later(0.01, engine.inprogress.discard, request)
            await asyncio.sleep(0.002)
        for scheduler in nodes:
            await scheduler.stop("shutdown")
        # 20 a second (slots 51.25 ms apart): about 39 in 2 s, fewer on a loaded machine
        assert len(sent) >= 30
        # coming back the moment the next slot was ready: two such leases a slot
        assert CountingFrontier.not_ready <= len(sent), (CountingFrontier.not_ready, len(sent))

    run(body)


def test_a_node_holds_at_most_its_item_bound_and_a_downloaders_worth_of_pages() -> None:
    """Pages the engine holds (downloaded, being parsed, their items on the way to a
    store) are what a crash fetches again: at CRAWLFLEET_ITEMS_PENDING_MAX plus
    CONCURRENT_REQUESTS of them, the node hands its engine nothing more until one is
    done, however many requests it holds ready."""

    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(store, engine, {"CRAWLFLEET_ITEMS_PENDING_MAX": 3})
        urls = [f"http://a.test/{i}" for i in range(100)]
        await MemoryFrontier("job", store).commit(
            "seeder", [Outgoing(fp_of(u), "a.test", 0, encode(Request(u))) for u in urls]
        )
        await scheduler.start(Spider("job"))
        held = await take(scheduler, engine, 3 + scheduler.steering.concurrency)
        await until(lambda: scheduler.ledger.ready > 0)
        assert scheduler.next_request() is None  # the bound and a downloader's worth
        engine.inprogress.discard(held[0])  # one is done
        assert scheduler.next_request() is not None
        await scheduler.stop("shutdown")

    run(body)
