"""The waiting set: a request waiting for its time (a retry's back-off, a tracked page
between two visits) is in its job's ``waiting`` sorted set, nobody's lease: no owner
entry, no member of ``leases``, so that a dead node's reclaim reads the leases in
flight only, however many requests wait. A waiting lease of the former form (held by
``records.WAITING`` in ``leases`` and ``owner``, left by a Redis upgraded with some in
flight) is still queued when its time comes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.records import WAITING, Outgoing, Revisit
from tests.support.frontier import lease_all, out

KW: dict[str, Any] = {"lease_ms": 60000, "offer_size": 50}
BEAT: dict[str, Any] = {"status": "{}", "busy": True, "lease_ms": 60000}
HOUR_MS = 3_600_000


async def where(f: Frontier, rid: str) -> tuple[bool, bool, bool]:
    """Whether *rid* is in the waiting set, the leases, the owner hash."""
    k = f.keys
    return (
        await f.client.zscore(k.waiting, rid) is not None,
        await f.client.zscore(k.leases, rid) is not None,
        await f.client.hexists(k.owner, rid),
    )


def test_a_waiting_request_has_no_owner_entry_and_is_not_in_the_leases(
    run_redis: Callable[..., Any],
) -> None:
    async def body(f: Frontier) -> None:
        await f.commit("n1", [out("page"), Outgoing(b"", "a", 0, b"retry", delay_ms=HOUR_MS)])
        held = (await f.lease("n1", 1, ["a"], per_site=1, **KW)).entries[0]
        assert await where(f, held.rid) == (False, True, True)  # a node's lease
        await f.commit("n1", revisits=[Revisit(held.rid, HOUR_MS, b"page v2", new=True)])
        retry = str(int(held.rid) + 1)
        for rid in (held.rid, retry):
            assert await where(f, rid) == (True, False, False)
            due = await f.client.zscore(f.keys.waiting, rid)
            assert due is not None and due > (await f.client.time())[0] * 1000
        assert await f.client.hlen(f.keys.owner) == 0
        assert await f.client.zcard(f.keys.leases) == 0
        c = await f.counters()
        assert (c["leased"], c["waiting"], c["acked"]) == (2, 2, 1)
        # they count as leased for whoever asks whether the job is over
        st = await f.heartbeat("n1", ttl_ms=5000, **BEAT)
        assert (st.leased, st.waiting, st.empty) == (2, 2, False)
        peek = await f.peek(10)
        assert (peek.queued, peek.leased) == (0, 2)
        # a reset removes the waiting set with the rest of the crawl state
        assert f.keys.waiting in f.keys.fixed()
        await f.reset()
        assert not await f.client.exists(f.keys.waiting)

    run_redis(body)


def test_a_dead_nodes_reclaim_leaves_many_waiting_requests_alone(
    run_redis: Callable[..., Any],
) -> None:
    waiting = 100_000

    async def body(f: Frontier) -> None:
        for start in range(0, waiting, 5000):
            batch = [
                Outgoing(b"", f"s{i % 100}", 0, b"w%d" % i, delay_ms=HOUR_MS)
                for i in range(start, start + 5000)
            ]
            await f.commit("n0", batch)
        await f.commit("n0", [out(f"u{i}") for i in range(3)])
        await f.heartbeat("dies", ttl_ms=150, **BEAT)
        lost = (await f.lease("dies", 3, ["a"], per_site=3, **KW)).entries
        assert len(lost) == 3
        # what a dead node's reclaim reads: the leases in flight, not what waits
        assert await f.client.hlen(f.keys.owner) == 3
        assert await f.client.zcard(f.keys.waiting) == waiting
        await asyncio.sleep(0.25)
        started = time.perf_counter()
        assert await f.reclaim_expired() == 3
        took = time.perf_counter() - started
        assert f.came_due == 0
        assert sorted(await lease_all(f, "n2")) == ["u0", "u1", "u2"]
        assert await f.client.zcard(f.keys.waiting) == waiting
        c = await f.counters()
        assert (c["waiting"], c["leased"], c["queued"]) == (waiting, waiting + 3, 0)
        # (a reclaim that read every waiting request took about 0.1 s of Redis here)
        assert took < 5.0

    run_redis(body)


def test_due_waiting_requests_are_queued_a_bounded_number_per_reclaim(
    run: Callable[..., Any],
) -> None:
    async def body(f: Any) -> None:
        await f.commit("n1", [Outgoing(b"", "a", 0, b"r%d" % i, delay_ms=50) for i in range(7)])
        await asyncio.sleep(0.15)
        assert await f.reclaim_expired(limit=3) == 0 and f.came_due in (3, 7)
        while f.came_due < 7:
            await f.reclaim_expired(limit=3)
        assert f.came_due == 7
        assert sorted(await lease_all(f, "n2")) == [f"r{i}" for i in range(7)]
        c = await f.counters()
        assert (c["waiting"], c["queued"], c["leased"]) == (0, 0, 7)

    run(body)


async def to_former_form(f: Frontier, rid: str) -> None:
    """Move waiting request *rid* to the form a Redis upgraded with it in flight holds:
    a lease of WAITING (leases and owner), not a member of the waiting set."""
    k = f.keys
    due = await f.client.zscore(k.waiting, rid)
    await f.client.zrem(k.waiting, rid)
    await f.client.zadd(k.leases, {rid: due})
    await f.client.hset(k.owner, rid, WAITING)


def test_a_waiting_lease_of_the_former_form_is_still_queued_when_its_time_comes(
    run_redis: Callable[..., Any],
) -> None:
    async def body(f: Frontier) -> None:
        # a retry (lean once queued) and a prioritised tracked page, both waiting
        # (2 s: a parallel test run on a busy machine can take a second over the steps
        # before "not before its time")
        retry = Outgoing(b"", "a", 0, b"retry", delay_ms=2000)
        await f.commit("n1", [retry, out("p", priority=5)])
        held = (await f.lease("n1", 1, ["a"], per_site=1, **KW)).entries[0]
        await f.commit("n1", revisits=[Revisit(held.rid, 2000, b"p v2", new=True)])
        rids = [str(int(held.rid) - 1), held.rid]
        for rid in rids:
            await to_former_form(f, rid)
            assert await where(f, rid) == (False, True, True)
        # not before its time: a dead node's reclaim, a grace, a node's release
        await f.heartbeat("dies", ttl_ms=50, **BEAT)
        await asyncio.sleep(0.1)
        assert await f.reclaim_expired() == 0 and f.came_due == 0
        assert await f.release("n1", [(rid, "a") for rid in rids]) == 0
        assert await lease_all(f, "n2") == []
        await asyncio.sleep(2.0)
        assert await f.reclaim_expired(grace_ms=60_000) == 0 and f.came_due == 2
        assert await f.client.hlen(f.keys.owner) == 0
        assert await f.client.zcard(f.keys.leases) == 0
        # the retry among new URLs, the tracked page among revisits: the share (0.5)
        # gives the new URL first
        assert await lease_all(f, "n2") == ["retry", "p v2"]
        c = await f.counters()
        assert (c["waiting"], c["leased"], c.get("requeued", 0)) == (0, 2, 0)

    run_redis(body)
