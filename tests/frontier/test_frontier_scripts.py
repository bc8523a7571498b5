"""The frontier contract (queueing, dedup, leases, acks, reclaim), kept by the Redis
frontier (its scripts, on a real Redis) and by the in-memory one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from crawlfleet.fleet.snapshot import snapshot
from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.memory import MemoryFrontier
from crawlfleet.frontier.records import Outgoing, SeedBatch
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys, seed_keys
from crawlfleet.redis.replies import text
from tests.support.frontier import fp, lease_all, out

T = TypeVar("T")


def set_aside_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The log lines that say an entry was set aside."""
    return [r.getMessage() for r in caplog.records if "set aside" in r.getMessage()]


def test_duplicates_are_dropped_and_reported(run: Callable[..., Any]) -> None:
    async def body(f: Frontier) -> None:
        r = await f.commit("n1", [out("u1"), out("u2"), out("u1")])
        assert (r.queued, r.duplicates, r.duplicate_indexes) == (2, 1, [2])
        r = await f.commit("n1", [out("u2"), out("u3")])
        assert (r.queued, r.duplicates, r.duplicate_indexes) == (1, 1, [0])
        c = await f.counters()
        assert c["queued"] == 3 and c["duplicates"] == 2

    run(body)


def test_duplicates_a_node_found_itself_count_in_the_jobs_epoch_only(
    run: Callable[..., Any],
) -> None:
    """A node's seen cache belongs to one epoch of the job: the duplicates it found
    count with a commit naming that epoch, not with another (the job was reset since,
    and they are not duplicates); a reset gives the job a new epoch."""

    async def body(f: Frontier) -> None:
        first = await f.commit("n1", [out("u1")])
        assert first.epoch and first.known_counted == 0
        r = await f.commit("n1", [out("u1")], known=3, epoch="not the job's")
        assert (r.duplicates, r.known_counted, r.epoch) == (1, 0, first.epoch)
        assert (await f.counters())["duplicates"] == 1
        r = await f.commit("n1", known=4, epoch=first.epoch)  # nothing else to send
        assert (r.duplicates, r.known_counted, r.epoch) == (0, 4, first.epoch)
        assert (await f.counters())["duplicates"] == 5
        await f.reset()
        r = await f.commit("n1", [out("u2")], known=2, epoch=first.epoch)
        assert r.epoch and r.epoch != first.epoch and r.known_counted == 0
        assert (await f.counters()).get("duplicates", 0) == 0

    run(body)


def test_the_feed_tells_each_node_what_the_others_queued(run: Callable[..., Any]) -> None:
    """A commit reads the job's feed from the node's place on (the fingerprints the
    job's commits added, in order, without the ones it found seen or that bypass the
    filter), then adds its own; a node that has read all of it is placed after its own;
    a node without a cache neither reads nor feeds it; a place of another epoch (the job
    was reset) reads the new epoch's feed from its start. A job of several shards keeps
    no feed."""

    async def body(f: Frontier) -> None:
        r = await f.commit("n1", [out("u1"), out("u2")], feed=0)
        if isinstance(f, JobFrontier):
            assert (r.feed_place, r.feed) == (-1, [])
            return
        epoch = r.epoch
        assert (r.feed_place, r.feed) == (2, [])  # its own are not read back
        r = await f.commit("n2", [out("u3"), out("u1"), out("x", dont_filter=True)], feed=0)
        assert (r.feed_place, r.feed) == (3, [fp("u1"), fp("u2")])
        r = await f.commit("n3", [out("u4")], feed=-1)  # no cache: no feed
        assert (r.feed_place, r.feed) == (-1, [])
        r = await f.commit("n1", [out("u5")], epoch=epoch, feed=2)
        assert (r.feed_place, r.feed) == (4, [fp("u3")])
        r = await f.commit("n2", epoch=epoch, feed=3)  # behind by one: its own u5 stays
        assert (r.feed_place, r.feed) == (4, [fp("u5")])
        r = await f.commit("n2", [out("u6")], epoch=epoch, feed=1)  # read again from 1
        assert (r.feed_place, r.feed) == (5, [fp("u2"), fp("u3"), fp("u5")])
        await f.reset()
        r = await f.commit("n1", [out("u7")], epoch=epoch, feed=4)
        assert r.epoch != epoch and (r.feed_place, r.feed) == (1, [])
        r = await f.commit("n2", epoch=epoch, feed=5)
        assert (r.feed_place, r.feed) == (1, [fp("u7")])

    run(body)


def test_the_feed_keeps_its_newest_and_reads_a_bounded_part(
    run_redis: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The feed keeps about FEED_KEPT fingerprints: a place older than the oldest kept
    reads from there; a commit reads at most FEED_READ."""
    import crawlfleet.frontier.client as client_module

    monkeypatch.setattr(client_module, "FEED_KEPT", 8)
    monkeypatch.setattr(client_module, "FEED_READ", 3)

    async def body(f: Frontier) -> None:
        r = await f.commit("n1", [out(f"u{i}") for i in range(20)], feed=0)
        assert r.feed_place == 20
        assert await f.client.llen(f.keys.feed) == 8  # trimmed to its newest 8
        r = await f.commit("n2", feed=0)
        assert (r.feed_place, r.feed) == (15, [fp("u12"), fp("u13"), fp("u14")])
        r = await f.commit("n2", [out("u20")], epoch=r.epoch, feed=r.feed_place)
        # behind before this commit: it reads its own u20 later, in turn
        assert (r.feed_place, r.feed) == (18, [fp("u15"), fp("u16"), fp("u17")])

    run_redis(body)


def test_dont_filter_bypasses_the_seen_filter(run: Callable[..., Any]) -> None:
    async def body(f: Frontier) -> None:
        await f.commit("n1", [out("u1")])
        r = await f.commit("n1", [out("u1", dont_filter=True), out("u1", dont_filter=True)])
        assert r.queued == 2 and r.duplicates == 0
        assert sorted(await lease_all(f)) == ["u1", "u1", "u1"]

    run(body)


def test_priority_then_fifo_within_a_site(run: Callable[..., Any]) -> None:
    async def body(f: Frontier) -> None:
        await f.commit(
            "n1",
            [
                out("low1", priority=-5),
                out("mid1"),
                out("high1", priority=9),
                out("mid2"),
                out("low2", priority=-5),
                out("high2", priority=9),
            ],
        )
        assert await lease_all(f) == ["high1", "high2", "mid1", "mid2", "low1", "low2"]

    run(body)


def test_leases_are_fair_across_sites(run: Callable[..., Any]) -> None:
    async def body(f: Frontier) -> None:
        big = [out(f"big{i}", "big") for i in range(100)]
        small = [out(f"s{s}-{i}", f"site{s}") for s in range(3) for i in range(3)]
        await f.commit("n1", big + small)
        offer = await f.offer(50)
        sites: list[str] = []
        for _ in range(3):
            res = await f.lease("n1", 4, offer, lease_ms=60000, per_site=1, offer_size=50)
            sites += [e.site for e in res.entries]
            offer = res.offer
        assert {s: sites.count(s) for s in set(sites)} == {
            "big": 3,
            "site0": 3,
            "site1": 3,
            "site2": 3,
        }
        # the small sites are empty now: only the big one is offered
        assert offer == ["big"]

    run(body)


def test_ack_removes_the_lease_and_only_the_owner_can_ack(run: Callable[..., Any]) -> None:
    async def body(f: Frontier) -> None:
        await f.commit("n1", [out("u1"), out("u2")])
        res = await f.lease("n1", 10, ["a"], lease_ms=60000, per_site=10, offer_size=10)
        rids = [e.rid for e in res.entries]
        r = await f.commit("n2", acks=rids)  # not n2's leases
        assert r.acked == 0
        r = await f.commit("n1", acks=[*rids, rids[0], "no such lease"])  # one acked twice
        assert r.acked == 2
        c = await f.counters()
        assert c["leased"] == 0 and c["queued"] == 0 and c["acked"] == 2
        assert await lease_all(f) == []

    run(body)


def test_release_returns_leases_to_their_place(run: Callable[..., Any]) -> None:
    async def body(f: Frontier) -> None:
        await f.commit("n1", [out(f"u{i}") for i in range(5)])
        res = await f.lease("n1", 2, ["a"], lease_ms=60000, per_site=2, offer_size=10)
        assert [e.payload for e in res.entries] == [b"u0", b"u1"]
        assert await f.release("n2", [(e.rid, e.site) for e in res.entries]) == 0
        assert await f.release("n1", [(e.rid, e.site) for e in res.entries]) == 2
        assert await lease_all(f) == ["u0", "u1", "u2", "u3", "u4"]

    run(body)


def test_expired_leases_are_reclaimed_and_renewed_ones_are_not(run: Callable[..., Any]) -> None:
    async def body(f: Frontier) -> None:
        await f.commit("n1", [out("u1"), out("u2")])
        # a lease of 1 s: room for a loaded machine between the lease and the renewal
        res = await f.lease("n1", 2, ["a"], lease_ms=1000, per_site=2, offer_size=10)
        keep = res.entries[0].rid
        await asyncio.sleep(0.1)
        st = await f.heartbeat(
            "n1", ttl_ms=5000, status="{}", busy=True, lease_ms=60000, renew=[keep]
        )
        assert st.leased == 2
        assert await f.reclaim_expired() == 0
        await asyncio.sleep(1.0)
        assert await f.reclaim_expired() == 1
        assert await lease_all(f, "n2") == [res.entries[1].payload.decode()]
        c = await f.counters()
        assert c["requeued"] == 1 and c["leased"] == 2

    run(body)


def test_a_heartbeat_renews_many_leases_and_only_its_own(run: Callable[..., Any]) -> None:
    """More leases than one renewing call carries (the script reads their owners and
    sets their deadlines a chunk at a time): every one of the node's is renewed, another
    node's and an unknown rid are not; acknowledged in one commit, each ends once."""

    async def body(f: Frontier) -> None:
        await f.commit("n1", [out(f"u{i}") for i in range(2501)])
        mine = await f.lease("n1", 2500, ["a"], lease_ms=1500, per_site=2500, offer_size=10)
        other = await f.lease("n2", 1, ["a"], lease_ms=1500, per_site=1, offer_size=10)
        assert len(mine.entries) == 2500 and len(other.entries) == 1
        renew = [e.rid for e in mine.entries] + [other.entries[0].rid, "no such lease"]
        await f.heartbeat("n1", ttl_ms=60000, status="{}", busy=True, lease_ms=60000, renew=renew)
        await asyncio.sleep(1.6)
        assert await f.reclaim_expired(limit=5000) == 1  # n2's only
        assert await lease_all(f, "n3") == [other.entries[0].payload.decode()]
        # the same rids, and n3's, acknowledged by n1 in one commit (twice one of them)
        acks = [*renew, renew[0]]
        assert (await f.commit("n1", acks=acks)).acked == 2500
        c = await f.counters()
        assert (c["acked"], c["leased"]) == (2500, 1)

    run(body)


def test_a_delayed_request_waits_then_any_node_takes_it(run: Callable[..., Any]) -> None:
    async def body(f: Frontier) -> None:
        # 3 s: room for a loaded machine before the checks that it is not due yet (at 1 s
        # they once came too late for the sharded frontier)
        retry = Outgoing(b"", "a", 0, b"retry", delay_ms=3000)
        committed_at = time.monotonic()
        r = await f.commit("n1", [out("u1"), retry])
        assert r.queued == 2  # both are in the job, one of them waiting
        c = await f.counters()
        assert (c["queued"], c["leased"], c["waiting"], c["enqueued"]) == (1, 1, 1, 2)
        assert await lease_all(f, "n2") == ["u1"]  # the retry is not leasable yet
        st = await f.heartbeat("n1", ttl_ms=5000, status="{}", busy=False, lease_ms=60000)
        assert st.leased == 2 and not st.empty  # the job is not over
        # the node that queued it dies: the wait is nobody's lease, nothing is reaped early
        await f.heartbeat("n1", ttl_ms=50, status="{}", busy=False, lease_ms=60000)
        await asyncio.sleep(0.1)
        assert await f.reclaim_expired() == 0 and f.came_due == 0
        assert await lease_all(f, "n3") == []
        await asyncio.sleep(max(0.0, committed_at + 3.1 - time.monotonic()))
        # its time has come: reclaiming queues it (not counted as a reclaimed lease), even
        # in the grace after a silence of the fleet (the job's start is one)
        assert await f.reclaim_expired(grace_ms=60_000) == 0 and f.came_due == 1
        assert await lease_all(f, "n3") == ["retry"]
        c = await f.counters()
        assert (c["waiting"], c.get("requeued", 0), c["queued"], c["leased"]) == (0, 0, 0, 2)

    run(body)


def test_a_dead_nodes_leases_come_back_at_once(run: Callable[..., Any]) -> None:
    async def body(f: Frontier) -> None:
        await f.commit("n1", [out(f"u{i}") for i in range(4)])
        hb: dict[str, Any] = {"status": "{}", "busy": True, "lease_ms": 60000}
        # its registration lapses 2 s on: room for two leases and a reclaim first on a
        # loaded machine (150 ms once was not, for the sharded frontier; 600 ms once
        # was not beside the cluster tests on a slow machine)
        await f.heartbeat("dies", ttl_ms=2000, **hb)
        await f.heartbeat("lives", ttl_ms=60000, **hb)
        kw: dict[str, Any] = {"lease_ms": 60000, "per_site": 2, "offer_size": 10}
        lost = await f.lease("dies", 2, ["a"], **kw)
        kept = await f.lease("lives", 2, ["a"], **kw)
        assert await f.reclaim_expired() == 0  # both alive, leases far from expiry
        await asyncio.sleep(2.1)
        # "dies" missed its heartbeat: its leases return long before their deadline
        assert await f.reclaim_expired() == 2
        assert await f.reclaim_expired() == 0  # reaped once
        assert sorted(await lease_all(f, "n3")) == sorted(e.payload.decode() for e in lost.entries)
        # the dead node comes back: it renews nothing, and cannot ack what it lost
        st = await f.heartbeat("dies", ttl_ms=60000, renew=[lost.entries[0].rid], **hb)
        assert st.leased == 4
        assert (await f.commit("dies", acks=[lost.entries[0].rid])).acked == 0
        assert (await f.commit("lives", acks=[e.rid for e in kept.entries])).acked == 2
        # ... and dies again: what it holds now comes back again
        again = await f.lease("dies", 1, ["a"], **kw)
        assert again.entries == []  # nothing left queued
        c = await f.counters()
        assert c["requeued"] == 2

    run(body)


def test_malformed_entries_are_set_aside(run_redis: Callable[..., Any]) -> None:
    async def body(f: Frontier) -> None:
        await f.commit("n1", [out("u1")])
        res = await f.lease("n1", 1, ["a"], lease_ms=60000, per_site=1, offer_size=10)
        await f.commit("n1", bad=[res.entries[0].rid])
        assert await f.client.llen(f.keys.bad) == 1
        c = await f.counters()
        assert c["bad"] == 1 and c["leased"] == 0

    run_redis(body)


def test_heartbeat_reports_job_state(run: Callable[..., Any]) -> None:
    async def body(f: Frontier) -> None:
        st = await f.heartbeat("n1", ttl_ms=5000, status="{}", busy=False, lease_ms=1000)
        assert st.empty and st.live_nodes == 1
        await f.heartbeat("n2", ttl_ms=5000, status="{}", busy=True, lease_ms=1000)
        st = await f.heartbeat("n1", ttl_ms=5000, status="{}", busy=False, lease_ms=1000)
        assert not st.empty and st.busy_others == 1 and st.live_nodes == 2
        await f.heartbeat("n2", ttl_ms=5000, status="leaving", busy=False, lease_ms=1000)
        await f.commit("n1", [out("u1")])
        st = await f.heartbeat("n1", ttl_ms=5000, status="{}", busy=False, lease_ms=1000)
        assert st.queued == 1 and st.live_nodes == 1 and not st.empty

    run(body)


def test_jobs_are_separate(run_redis: Callable[..., Any]) -> None:
    async def body(f: Frontier) -> None:
        await f.commit("n1", [out("u1")])
        other = Frontier(f.client, JobKeys.of(f.keys.prefix, "job2"), f.seen)
        r = await other.commit("n1", [out("u1")])
        assert r.queued == 1
        await other.reset()
        assert await lease_all(f) == ["u1"]

    run_redis(body)


def test_reset_deletes_every_key_of_the_job(run_redis: Callable[..., Any]) -> None:
    async def body(f: Frontier) -> None:
        await f.commit("n1", [out(f"u{i}", f"s{i % 4}") for i in range(20)])
        await f.lease("n1", 3, await f.offer(10), lease_ms=60000, per_site=1, offer_size=10)
        await f.heartbeat("n1", ttl_ms=5000, status="{}", busy=False, lease_ms=1000)
        assert await f.reset() > 0
        left = [k async for k in f.client.scan_iter(match=f"{f.keys.prefix}:*")]
        assert left == []
        r = await f.commit("n1", [out("u1")])
        assert r.queued == 1  # the seen-filter is gone too

    run_redis(body)


def test_keys_share_the_job_hash_tag(key_prefix: str) -> None:
    keys = JobKeys.of(key_prefix, "myjob")
    for key in [*keys.fixed(), keys.queue("example.com"), keys.bloom_layer(3)]:
        assert "{myjob}" in key


def test_a_malformed_entry_is_set_aside_and_blocks_nothing(
    run_redis: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("ERROR", logger="crawlfleet.frontier.client")

    async def body(f: Frontier) -> None:
        await f.commit("n1", [out(f"u{i}") for i in range(4)])
        rids = [
            r.rid
            for r in (
                await f.lease("n1", 4, ["a"], lease_ms=60000, per_site=4, offer_size=10)
            ).entries
        ]
        # two entries lose their separators (a bug, a version skew, a hand edit)
        await f.client.hset(f.keys.req, rids[0], b"garbage without separators")
        await f.client.hset(f.keys.req, rids[1], b"x\0a\0no numeric score")
        # the node dies: every lease is reclaimed; the malformed ones go to the bad list
        assert await f.release("n1", [(rid, "a") for rid in rids]) == 2
        assert await f.client.llen(f.keys.bad) == 2
        # each one logged, naming its key and what is wrong with it
        said = set_aside_lines(caplog)
        assert len(said) == 2, said
        assert all(f.keys.req in line and f.keys.bad in line for line in said)
        assert f"entry {rids[0]} " in said[0] and "no separator" in said[0]
        assert f"entry {rids[1]} " in said[1] and "score 'x' is not a number" in said[1]
        assert "format version" not in caplog.text
        again = await f.lease("n2", 4, ["a"], lease_ms=1, per_site=4, offer_size=10)
        assert len(again.entries) == 2
        # an entry malformed while leased: the lease still returns it (site ""), expired
        # leases are reclaimed past it
        await f.client.hset(f.keys.req, again.entries[0].rid, b"broken")
        await asyncio.sleep(0.01)
        assert await f.reclaim_expired() == 1
        assert await f.client.llen(f.keys.bad) == 3
        said = set_aside_lines(caplog)
        assert len(said) == 3 and f"entry {again.entries[0].rid} " in said[2]
        assert "no separator" in said[2]
        last = await f.lease("n3", 4, ["a"], lease_ms=60000, per_site=4, offer_size=10)
        assert [e.payload for e in last.entries] == [again.entries[1].payload]
        await f.client.hset(f.keys.req, last.entries[0].rid, b"no separators")
        await f.commit("n1", [out("u9")])
        leased = await f.lease("n3", 4, ["a"], lease_ms=60000, per_site=4, offer_size=10)
        assert [e.payload for e in leased.entries] == [b"u9"]

    run_redis(body)


@pytest.mark.timing  # times of a second, stalled by a loaded parallel run
def test_no_node_counts_dead_for_a_silence_of_the_whole_fleet(run: Callable[..., Any]) -> None:
    """Redis was down or hung: no node could heartbeat. Once it answers again, the
    first node back must not reap the others before they had a chance to renew."""

    async def body(f: Frontier) -> None:
        # times of a second: a parallel test run on a busy machine can stall a step
        # for a few hundred ms
        beat: dict[str, Any] = {"ttl_ms": 1000, "status": "{}", "busy": True, "lease_ms": 60000}
        await f.commit("a", [out("u1"), out("u2")])
        for node in ("a", "b"):
            await f.heartbeat(node, **beat)
            await f.lease(node, 1, ["a"], lease_ms=60000, per_site=1, offer_size=10)
        await asyncio.sleep(1.2)  # every node silent for longer than its time-to-live
        await f.heartbeat("a", **beat)  # "a" is back first, and reclaims at once
        assert await f.reclaim_expired(grace_ms=1000) == 0  # "b" is not dead yet
        await f.heartbeat("b", **beat)
        assert await f.reclaim_expired(grace_ms=1000) == 0
        # a node that really died ("b", silent from now on) is reaped once the grace
        # is over, while "a" goes on heartbeating
        for _ in range(3):
            await asyncio.sleep(0.4)
            await f.heartbeat("a", **beat)
        assert await f.reclaim_expired(grace_ms=1000) == 1

    run(body)


def test_a_counter_that_is_not_a_number_costs_a_figure_not_the_crawl(
    run_redis: Callable[..., Any],
) -> None:
    async def body(f: Frontier) -> None:
        await f.commit("n1", [out("u1"), out("u2")])
        for name in ("queued", "leased", "seq", "control_seq", "served"):
            await f.client.hset(f.keys.counters, name, "abc")
        assert (await snapshot(f.client, f.keys)).queued == 0  # `status` shows 0, no crash
        assert await f.control_seq() == 0
        r = await f.commit("n1", [out("u3")])
        assert r.queued == 1
        leased = await lease_all(f)
        assert sorted(leased) == ["u1", "u2", "u3"]  # no request id given twice
        st = await f.heartbeat("n1", ttl_ms=5000, status="{}", busy=True, lease_ms=1000)
        assert st.leased == 3
        assert await f.send_control("*", "state", "paused") == 1
        c = await f.counters()
        assert c["repaired"] >= 3 and c["leased"] == 3
        res = await f.lease("n1", 1, ["a"], lease_ms=1000, per_site=1, offer_size=10)
        assert res.entries == []

    run_redis(body)


def test_a_request_whose_entry_is_gone_is_dropped_and_logged(
    run_redis: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="crawlfleet.redis.scripts")

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if "is gone" in r.getMessage()]

    async def body(f: Frontier) -> None:
        # queued at priority 5 (its entry in the req hash), the entry deleted by hand
        await f.commit("n1", [out("u1", priority=5), out("u2", priority=5)])
        rids = await f.client.zrange(f.keys.queue("a"), 0, -1)
        await f.client.hdel(f.keys.req, rids[0])
        res = await f.lease("n1", 5, ["a"], lease_ms=60000, per_site=5, offer_size=10)
        assert [e.payload for e in res.entries] == [b"u2"]
        assert len(said()) == 1 and f"request {text(rids[0])} dropped" in said()[0]
        assert f"its entry in {f.keys.req} is gone" in said()[0]
        # leased, then its entry deleted: given back, it is dropped and said too
        await f.client.hdel(f.keys.req, res.entries[0].rid)
        assert await f.release("n1", [(res.entries[0].rid, "a")]) == 0
        assert len(said()) == 2 and f"request {res.entries[0].rid} dropped" in said()[1]
        assert (await f.counters())["leased"] == 0

    run_redis(body)


def test_a_repaired_counter_is_logged_and_never_below_zero(
    run_redis: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="crawlfleet.redis.scripts")

    async def body(f: Frontier) -> None:
        await f.commit("n1", [out(f"u{i}") for i in range(3)])
        await f.client.hset(f.keys.counters, "queued", "abc")
        await f.lease("n1", 3, ["a"], lease_ms=60000, per_site=3, offer_size=10)
        c = await f.counters()
        assert c["queued"] == 0 and c["repaired"] == 1  # not -3
        said = [r.getMessage() for r in caplog.records if "repaired" in r.getMessage()]
        assert len(said) == 1 and f"Counter queued of {f.keys.counters}" in said[0]
        assert "it was 'abc'" in said[0] and "it is now 0" in said[0]
        # a count that drifted below what it counts: it stops at 0, said with its values
        await f.commit("n1", [out(f"v{i}") for i in range(3)])
        await f.client.hset(f.keys.counters, "queued", 1)
        await f.lease("n1", 3, ["a"], lease_ms=60000, per_site=3, offer_size=10)
        c = await f.counters()
        assert c["queued"] == 0 and c["repaired"] == 2
        said = [r.getMessage() for r in caplog.records if "repaired" in r.getMessage()]
        assert len(said) == 2 and "it was '1'" in said[1] and "it is now 0" in said[1]
        # an unreadable sequence: its old and new value
        await f.client.hset(f.keys.counters, "seq", "zz")
        await f.commit("n1", [out("w1")])
        said = [r.getMessage() for r in caplog.records if "repaired" in r.getMessage()]
        assert len(said) == 3 and "Counter seq" in said[2] and "it was 'zz'" in said[2]
        assert (await f.counters())["seq"] > 1_000_000

    run_redis(body)


@pytest.fixture(params=["exact", "memory", "sharded"])
def run_jobs(request: Any, redis_server_url: str, key_prefix: str) -> Callable[..., Any]:
    """run_jobs(fn) runs ``await fn(frontier_of)``, where ``frontier_of(job)`` is the
    frontier of *job* in one shared Redis (or one shared memory store)."""

    def runner(fn: Callable[[Callable[[str], Any]], Awaitable[T]]) -> T:
        async def main() -> T:
            if request.param == "memory":
                store: dict[str, Any] = {}
                return await fn(lambda job: MemoryFrontier(job, store))
            client = make_client(redis_server_url)
            try:
                shards = 5 if request.param == "sharded" else 1
                return await fn(
                    lambda job: JobFrontier(client, JobKeys.of(key_prefix, job), shards=shards)
                )
            finally:
                await client.aclose()

        return asyncio.run(main())

    return runner


@pytest.mark.timing  # times of a second, stalled by a loaded parallel run
def test_jobs_share_a_sites_budget_and_back_off_unless_given_their_own(
    run_jobs: Callable[..., Any],
) -> None:
    async def body(frontier_of: Callable[[str], Frontier]) -> None:
        a, b = frontier_of("job-a"), frontier_of("job-b")
        for f, tag in ((a, "a"), (b, "b")):
            await f.commit("n1", [out(f"{tag}{i}", "s") for i in range(3)])
            await f.commit("n1", [out(f"{tag}t{i}", "t") for i in range(3)])
        kw: dict[str, Any] = {"lease_ms": 60000, "per_site": 3, "offer_size": 10}
        paced: dict[str, Any] = {"intervals": [300_000], "horizon_us": 700_000}
        r = await a.lease("n1", 3, ["s"], budgets=["s"], **paced, **kw)
        assert [e.slot_us for e in r.entries] == [0, 300_000, 600_000]
        # job b's nodes draw on the same schedule: nothing until a's last slot is near
        r = await b.lease("n2", 3, ["s"], budgets=["s"], **paced, **kw)
        # (a job of several shards says "lease again now" when a shard not tried, here
        # the one of site t, may be ready)
        sharded = isinstance(b, JobFrontier) and len(await b.shards()) > 1
        assert r.entries == [] and (r.ready_in_us > 0 or (sharded and "t" in r.offer))
        # a budget of its own (crawlfleet limits set JOB ...) starts from now
        r = await b.lease("n2", 3, ["s"], budgets=["s|job=job-b"], **paced, **kw)
        assert [e.slot_us for e in r.entries] == [0, 300_000, 600_000]
        # a back-off reported by one job's node slows the site for every job
        await a.backoff({"t": 0}, first_ms=5000)
        r = await b.lease("n2", 3, ["t"], horizon_us=1_000_000, **kw)
        assert len(r.entries) == 1
        # ... also a job with a budget of its own: the back-off's spacing is shared
        r = await a.lease("n1", 3, ["t"], budgets=["t|job=job-a"], horizon_us=1_000_000, **kw)
        assert r.entries == [] and r.ready_in_us > 0

    run_jobs(body)


def test_a_lease_grants_an_idle_budgets_first_slot_a_lead_ahead(
    run: Callable[..., Any],
) -> None:
    """A node far from Redis asks for its first slot a reply's way ahead (lead_us): a
    slot granted for "now" reached it already missed. A budget in use lies ahead by
    more: the lead does not move its schedule."""

    async def body(f: Frontier) -> None:
        await f.commit("n1", [out(f"s{i}", "s") for i in range(4)])
        kw: dict[str, Any] = {"lease_ms": 60000, "per_site": 2, "offer_size": 10}
        paced: dict[str, Any] = {"intervals": [300_000], "horizon_us": 700_000}
        r = await f.lease("n1", 2, ["s"], lead_us=40_000, **paced, **kw)
        assert [e.slot_us for e in r.entries] == [40_000, 340_000]
        start = r.now_us
        await asyncio.sleep(0.35)  # the budget's next slots within the horizon
        r = await f.lease("n2", 2, ["s"], lead_us=40_000, **paced, **kw)
        assert [r.now_us + e.slot_us - start for e in r.entries] == [640_000, 940_000]

    run(body)


def test_priority_zero_requests_queue_lean_and_keep_their_order(
    run: Callable[..., Any],
) -> None:
    """Requests at priority 0 wait in a FIFO list without a req entry; priorities above
    0 still come first and those below 0 last, and what comes back goes back in order."""

    async def body(f: Frontier) -> None:
        mixed = [("z0", 0), ("hi1", 1), ("z1", 0), ("lo1", -1), ("z2", 0), ("hi2", 2), ("z3", 0)]
        await f.commit("n1", [out(url, priority=p) for url, p in mixed])
        if isinstance(f, Frontier):
            assert await f.client.hlen(f.keys.req) == 3  # the other priorities only
            assert await f.client.llen(f.keys.fifo("a")) == 4
        first = await f.lease("n1", 4, ["a"], lease_ms=60000, per_site=4, offer_size=10)
        assert [e.payload for e in first.entries] == [b"hi2", b"hi1", b"z0", b"z1"]
        assert {e.site for e in first.entries} == {"a"}
        # given back (in any order): each at its place again
        back = [(e.rid, e.site) for e in reversed(first.entries)]
        assert await f.release("n1", back[:1]) == 1
        assert await f.release("n1", back[1:]) == 3
        if isinstance(f, Frontier):
            assert await f.client.hlen(f.keys.req) == 3
        assert await lease_all(f) == ["hi2", "hi1", "z0", "z1", "z2", "z3", "lo1"]
        assert (await f.counters())["queued"] == 0

    run(body)


def test_one_commit_for_several_sites_keeps_each_sites_order(
    run: Callable[..., Any],
) -> None:
    """A commit queues its priority-0 requests site by site (one push a site), each site
    in the order of the batch, duplicates left out, every site offered; ids follow the
    batch's order across sites."""

    async def body(f: Frontier) -> None:
        await f.commit("n0", [out("b-old", "b")])
        batch = [("a1", "a"), ("b1", "b"), ("b-old", "b"), ("a2", "a"), ("c1", "c"),
                 ("b2", "b"), ("a1", "a"), ("a3", "a")]  # fmt: skip
        result = await f.commit("n1", [out(url, site) for url, site in batch])
        assert result.queued == 6 and result.duplicates == 2
        assert sorted(await f.offer(10)) == ["a", "b", "c"]
        for site, expected in (("a", ["a1", "a2", "a3"]), ("b", ["b-old", "b1", "b2"])):
            got = await f.lease("n1", 10, [site], lease_ms=60000, per_site=10, offer_size=10)
            assert [e.payload.decode() for e in got.entries] == expected
            rids = [int(e.rid.rsplit(":", 1)[-1]) for e in got.entries]
            assert rids == sorted(rids)
        assert await lease_all(f) == ["c1"]

    run(body)


def test_a_malformed_fifo_item_is_set_aside_and_blocks_nothing(
    run_redis: Callable[..., Any],
) -> None:
    async def body(f: Frontier) -> None:
        await f.commit("n1", [out("u1"), out("u2")])
        await f.client.lset(f.keys.fifo("a"), 0, b"no separator at all")
        res = await f.lease("n1", 5, ["a"], lease_ms=60000, per_site=5, offer_size=10)
        sites = [e.site for e in res.entries]
        assert sites == ["", "a"] and res.entries[1].payload == b"u2"
        # the lease says what is wrong with it, and where it is (the node logs both)
        assert res.entries[0].fault.startswith("no separator")
        assert res.entries[0].where == f.keys.req and res.entries[1].fault == ""
        await f.commit("n1", acks=[res.entries[1].rid], bad=[res.entries[0].rid])
        assert await f.client.lrange(f.keys.bad, 0, -1) == [b"no separator at all"]
        c = await f.counters()
        assert c["queued"] == 0 and c["leased"] == 0 and c["bad"] == 1

    run_redis(body)


def test_a_retry_whose_wait_is_over_queues_after_what_is_queued(
    run: Callable[..., Any],
) -> None:
    async def body(f: Frontier) -> None:
        await f.commit("n1", [out("u1"), Outgoing(b"", "a", 0, b"retry", delay_ms=30)])
        await f.commit("n1", [out("u2")])
        await asyncio.sleep(0.1)
        await f.reclaim_expired()
        assert f.came_due == 1
        assert await lease_all(f) == ["u1", "u2", "retry"]

    run(body)


def test_priority_zero_entries_from_before_fifo_lists_come_first(
    run_redis: Callable[..., Any],
) -> None:
    """A job queued by an earlier version has its priority-0 requests in the site's
    sorted set: they are older than any FIFO item and are served before them."""

    async def body(f: Frontier) -> None:
        await f.commit("n1", [out("new")])
        k = f.keys
        await f.client.hset(k.req, "0", b"0\0a\0legacy")
        await f.client.zadd(k.queue("a"), {"0": 0})
        await f.client.hincrby(k.counters, "queued", 1)
        assert await lease_all(f) == ["legacy", "new"]

    run_redis(body)


def test_a_seed_key_is_read_once_it_exists_and_an_absent_one_locks_nothing(
    run_redis: Callable[..., Any], key_prefix: str
) -> None:
    """An absent seed key reads as "none" (one EXISTS, no script) and takes no reader
    lock: a node that looked before the key existed does not keep the next one out. A
    key of another type says its type; a list is read from its head."""

    async def body(f: Frontier) -> None:
        seed = f"{key_prefix}:seeds-{id(f)}"
        assert await f.read_seeds(seed, 10, "n1", 60_000) == SeedBatch("none", 0, [])
        await f.client.rpush(seed, b"http://a.test/1", b"http://a.test/2")
        try:
            batch = await f.read_seeds(seed, 1, "n2", 60_000)
            assert batch == SeedBatch("list", 2, [b"http://a.test/1"])
            assert (await f.read_seeds(seed, 1, "n1", 60_000)).kind == "busy"
            await f.done_seeds(seed, "n2", batch)
            await f.client.delete(seed)
            await f.client.set(seed, b"not a list")
            assert (await f.read_seeds(seed, 1, "n1", 60_000)).kind == "string"
        finally:
            keys = seed_keys(seed)
            await f.client.delete(seed, keys.reader, keys.unreadable)

    run_redis(body)
