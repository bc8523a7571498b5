"""Revisits and untracks (continuous crawls, issue 24): a finished lease kept under its
rid for a later visit, or dropped for good, with the change stream and the counters;
the contract every frontier keeps (Redis in each seen-filter mode, memory, five
shards), then what a sharded job does with them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from crawlfleet.frontier.base import PartialCommit
from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.records import Leased, Outgoing, Revisit, Untrack
from crawlfleet.frontier.sharded import JobFrontier, shard_of
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from tests.support.frontier import lease_all, out, shard_down, site_in

KW: dict[str, Any] = {"lease_ms": 60000, "offer_size": 50}


def counts(c: dict[str, int], *names: str) -> tuple[int, ...]:
    return tuple(c.get(name, 0) for name in names)


async def holder_of(f: Any, site: str) -> Frontier | None:
    """The Redis frontier (shard) that holds *site*'s keys (None: in memory)."""
    if isinstance(f, JobFrontier):
        parts = await f.shards()
        return parts[shard_of(site, len(parts))]
    return f if isinstance(f, Frontier) else None


async def lease_every(f: Any, node: str, want: int, sites: list[str]) -> list[Leased]:
    """Lease until *want* requests are leased to *node* (offers taken from each reply)."""
    got: list[Leased] = []
    offer = sites
    for _ in range(50):
        r = await f.lease(node, want - len(got), offer, per_site=want, **KW)
        got += r.entries
        if len(got) >= want:
            return got
        offer = r.offer or sites
    raise AssertionError(f"leased {len(got)} of {want}")


def test_a_revisit_keeps_its_rid_and_comes_back_with_its_new_payload_after_its_delay(
    run: Callable[..., Any],
) -> None:
    async def body(f: Any) -> None:
        await f.commit("n1", [out("page"), out("listing", priority=5)])
        first = (await f.lease("n1", 2, ["a"], per_site=2, **KW)).entries
        assert [e.payload for e in first] == [b"listing", b"page"]
        rid = {e.payload: e.rid for e in first}
        kept = [
            Revisit(rid[b"page"], 500, b"page v2", new=True),
            Revisit(rid[b"listing"], 500, b"listing v2", new=True),
        ]
        r = await f.commit("n1", revisits=kept)
        assert (r.revisited, r.untracked, r.acked) == (2, 0, 0)
        c = await f.counters()
        names = ("queued", "leased", "waiting", "acked", "revisits", "tracked")
        assert counts(c, *names) == (0, 2, 2, 2, 0, 2)  # kept: not revisited yet
        assert await lease_all(f, "n2") == []  # waiting for its time
        assert await f.reclaim_expired() == 0 and f.came_due == 0
        await f.commit("n1", [out("newer", priority=5)])  # queued while they wait
        await asyncio.sleep(0.7)
        # the reclaim that queues waiting retries queues them
        assert await f.reclaim_expired() == 0 and f.came_due == 2
        assert (await f.counters()).get("revisits_queued") == 2
        home = await holder_of(f, "a")
        if home is not None:
            k = home.keys
            # in the site's revisit list, apart from new URLs, first due first: the
            # priority-0 one lean (no req entry), the prioritised one by its rid (its
            # entry kept, marked a revisit's)
            page, listing = rid[b"page"].split(":")[-1], rid[b"listing"].split(":")[-1]
            assert await home.client.lrange(k.revisits("a"), 0, -1) == [
                f"{page}\0page v2".encode(),
                listing.encode(),
            ]
            assert not await home.client.hexists(k.req, page)
            assert await home.client.llen(k.fifo("a")) == 0
            assert await home.client.zscore(k.queue("a"), listing) is None
            entry = await home.client.hget(k.req, listing)
            assert entry.endswith(b"\0a\0listing v2") and entry.split(b"\0")[0].endswith(b".")
        again = (await f.lease("n2", 3, ["a"], per_site=3, **KW)).entries
        # same rids and site, new payloads; the new URL first (share 0.5: the site's
        # credit reaches 1 on its second request), then the revisits in due order
        assert [(e.rid, e.site, e.payload) for e in again] == [
            (again[0].rid, "a", b"newer"),
            (rid[b"page"], "a", b"page v2"),
            (rid[b"listing"], "a", b"listing v2"),
        ]
        assert (await f.counters()).get("revisits_queued") == 0
        # the second visit: kept again, not new
        r = await f.commit("n2", revisits=[Revisit(e.rid, 60_000, e.payload) for e in again[1:]])
        assert r.revisited == 2
        c = await f.counters()
        assert counts(c, *names) == (0, 3, 2, 4, 2, 2)  # two revisits

    run(body)


def test_a_revisit_or_untrack_of_a_lease_no_longer_the_nodes_does_nothing(
    run: Callable[..., Any],
) -> None:
    async def body(f: Any) -> None:
        await f.commit("n1", [out("u1")])
        lost = (await f.lease("n1", 1, ["a"], per_site=1, **KW)).entries[0]
        assert await f.release("n1", [(lost.rid, lost.site)]) == 1  # (as a reclaim does)
        held = (await f.lease("n2", 1, ["a"], per_site=1, **KW)).entries[0]
        assert held.rid == lost.rid
        stale = Revisit(lost.rid, 10, b"stale", new=True, event=b"changed")
        r = await f.commit("n1", revisits=[stale], untracked=[Untrack(lost.rid, b"gone")])
        assert (r.revisited, r.untracked) == (0, 0)
        c = await f.counters()
        assert counts(c, "tracked", "revisits", "changes", "waiting", "leased") == (0, 0, 0, 0, 1)
        assert await f.changes() == []
        # its holder's revisit is applied; sent again (after an outage), nothing more
        kept = Revisit(held.rid, 60_000, b"u1 v2", new=True)
        assert (await f.commit("n2", revisits=[kept])).revisited == 1
        assert (await f.commit("n2", revisits=[kept])).revisited == 0
        assert (await f.commit("n2", untracked=[Untrack(held.rid)])).untracked == 0
        assert (await f.commit("n2", acks=[held.rid])).acked == 0  # it waits: nobody's
        c = await f.counters()
        assert counts(c, "tracked", "revisits", "waiting", "leased", "acked") == (1, 0, 1, 1, 1)

    run(body)


def test_an_untrack_acknowledges_for_good_and_counts_tracked_down(
    run: Callable[..., Any],
) -> None:
    async def body(f: Any) -> None:
        await f.commit("n1", [out("u1"), out("u2")])
        leased = (await f.lease("n1", 2, ["a"], per_site=2, **KW)).entries
        kept = [Revisit(e.rid, 200, e.payload, new=True) for e in leased]
        assert (await f.commit("n1", revisits=kept)).revisited == 2
        await asyncio.sleep(0.4)
        await f.reclaim_expired()
        again = {e.payload: e for e in (await f.lease("n1", 2, ["a"], per_site=2, **KW)).entries}
        gone = b'{"url": "u1", "kind": "gone"}'
        r = await f.commit(
            "n1",
            revisits=[Revisit(again[b"u2"].rid, 60_000, b"u2")],
            untracked=[Untrack(again[b"u1"].rid, gone)],
        )
        assert (r.revisited, r.untracked, r.acked) == (1, 1, 0)
        c = await f.counters()
        names = ("tracked", "revisits", "leased", "waiting", "acked", "changes", "queued")
        assert counts(c, *names) == (1, 1, 1, 1, 4, 1, 0)  # u2 revisited once
        assert [e for _, e in await f.changes()] == [gone]
        assert await lease_all(f, "n2") == []  # u1 is gone, u2 waits an hour

    run(body)


def test_events_reach_the_change_stream_which_keeps_about_its_maxlen(
    run: Callable[..., Any],
) -> None:
    maxlen = 10

    async def body(f: Any) -> None:
        sites = ["a", "b", "c", "d"]
        await f.commit("n1", [out(f"u{i}", sites[i % 4]) for i in range(200)])
        leased = await lease_every(f, "n1", 200, sites)
        kept = [Revisit(e.rid, 60_000, e.payload, True, b"ev-" + e.payload) for e in leased]
        kept[0] = Revisit(leased[0].rid, 60_000, leased[0].payload, True, b"")  # no event
        r = await f.commit("n1", revisits=kept)
        assert r.revisited == 200
        c = await f.counters()
        assert counts(c, "changes", "revisits", "tracked") == (199, 0, 200)
        events = [event for _, event in await f.changes(1000)]
        assert len(set(events)) == len(events) and set(events) <= {v.event for v in kept[1:]}
        if isinstance(f, Frontier):  # one stream: the newest events, in order, field "e"
            assert events[-3:] == [v.event for v in kept[-3:]]
            newest = (await f.client.xrevrange(f.keys.changes, count=1))[0][1]
            assert newest == {b"e": kept[-1].event}
        homes = {id(h): h for s in sites if (h := await holder_of(f, s)) is not None}
        if not homes:  # in memory: exactly maxlen
            assert events == [v.event for v in kept[-maxlen:]]
            return
        # MAXLEN ~: Redis trims whole nodes of the stream, so up to a node more is kept
        node_entries = int(
            (await f.client.config_get("stream-node-max-entries"))["stream-node-max-entries"]
        )
        for home in homes.values():
            assert 0 < await home.client.xlen(home.keys.changes) <= maxlen + node_entries
        if len(homes) == 1:  # (spread over shards, each stream may hold less than a node)
            assert len(events) < 199

    run(body, changes_maxlen=maxlen)


def test_a_job_whose_only_leases_are_waiting_revisits_is_not_finished(
    run: Callable[..., Any],
) -> None:
    async def body(f: Any) -> None:
        await f.commit("n1", [out("u1")])
        e = (await f.lease("n1", 1, ["a"], per_site=1, **KW)).entries[0]
        assert (await f.commit("n1", revisits=[Revisit(e.rid, 3_600_000, b"u1", True)])).revisited
        beat: dict[str, Any] = {"status": "{}", "busy": False, "lease_ms": 60000}
        st = await f.heartbeat("n1", ttl_ms=5000, **beat)
        assert (st.queued, st.leased, st.waiting, st.busy_others) == (0, 1, 1, 0)
        assert not st.empty and st.leased_total == 1
        # its node dies: the wait is nobody's lease, nothing is reclaimed before its time
        await f.heartbeat("n1", ttl_ms=50, **beat)
        await asyncio.sleep(0.1)
        assert await f.reclaim_expired() == 0 and f.came_due == 0
        st = await f.heartbeat("n2", ttl_ms=5000, **beat)
        assert (st.leased, st.waiting) == (1, 1) and not st.empty

    run(body)


def test_each_revisit_goes_to_the_shard_of_its_rid(redis_server_url: str, key_prefix: str) -> None:
    sites = [site_in(k, 3, "r") for k in range(3)]

    async def body() -> None:
        client = make_client(redis_server_url)
        try:
            f = JobFrontier(client, JobKeys.of(key_prefix, "job"), shards=3)
            await f.commit("n1", [out(f"https://{s}/{i}", s) for s in sites for i in range(2)])
            leased = await lease_every(f, "n1", 6, sites)
            kept = [Revisit(e.rid, 300, e.payload + b" v2", True, e.site.encode()) for e in leased]
            # with a link to queue in shard 0: the revisits follow once it is queued
            link = out(f"https://{sites[0]}/new", sites[0])
            r = await f.commit("n1", [link], revisits=kept)
            assert (r.queued, r.revisited) == (1, 6)
            parts = await f.shards()
            for k, part in enumerate(parts):
                c = await part.counters()
                assert counts(c, "revisits", "tracked", "waiting", "changes") == (0, 2, 2, 2)
                assert [e for _, e in await part.changes()] == [sites[k].encode()] * 2
                for e in leased:
                    shard, _, own = e.rid.partition(":")
                    if int(shard) == k:  # in the shard's waiting set, nobody's lease
                        assert await client.zscore(part.keys.waiting, own) is not None
                        assert await client.hget(part.keys.owner, own) is None
                        assert await client.zscore(part.keys.leases, own) is None
                        entry = await client.hget(part.keys.req, own)
                        assert entry.endswith(b"\0" + e.site.encode() + b"\0" + e.payload + b" v2")
            assert counts(await f.counters(), "tracked", "revisits", "changes") == (6, 0, 6)
            assert len(await f.changes()) == 6
            await asyncio.sleep(0.5)
            await f.reclaim_expired()
            assert f.came_due == 6
            again = await lease_every(f, "n1", 7, sites)
            assert {e.rid for e in again} >= {e.rid for e in leased}
            tracked = {v.rid for v in kept}
            revisits = [Revisit(e.rid, 60_000, e.payload) for e in again if e.rid in tracked]
            # shard 1 fails: what the others did is said, the rest is sent again
            down = shard_down(f, 1)
            with pytest.raises(PartialCommit) as raised:
                await f.commit("n1", revisits=revisits)
            part = raised.value
            done_here = {v.rid for v in revisits if not v.rid.startswith("1:")}
            assert part.acks == done_here and part.result.revisited == 4
            await down.aclose()
            f._parts = None  # the master is back
            rest = [v for v in revisits if v.rid not in part.acks]
            assert (await f.commit("n1", revisits=rest)).revisited == 2
            c = await f.counters()
            assert counts(c, "tracked", "revisits", "waiting", "leased") == (6, 6, 6, 7)
        finally:
            await client.aclose()

    asyncio.run(body())


def test_a_revisit_whose_entry_is_gone_ends_its_lease(run_redis: Callable[..., Any]) -> None:
    async def body(f: Frontier) -> None:
        await f.commit("n1", [out("u1"), out("u2")])
        a, b = (await f.lease("n1", 2, ["a"], per_site=2, **KW)).entries
        await f.client.hdel(f.keys.req, a.rid)  # a hand edit, a bug
        await f.client.hset(f.keys.req, b.rid, b"no separators")
        r = await f.commit("n1", revisits=[Revisit(a.rid, 10, b"x"), Revisit(b.rid, 10, b"y")])
        assert r.revisited == 0
        c = await f.counters()
        assert counts(c, "leased", "waiting", "bad", "revisits") == (0, 0, 1, 0)
        assert await f.client.lrange(f.keys.bad, 0, -1) == [b"no separators"]

    run_redis(body)


def test_a_waiting_request_is_not_queued_twice_by_two_reclaims(run: Callable[..., Any]) -> None:
    async def body(f: Any) -> None:
        await f.commit("n1", [Outgoing(b"", "a", 0, b"later", delay_ms=100)])
        await asyncio.sleep(0.2)
        await asyncio.gather(f.reclaim_expired(), f.reclaim_expired())
        assert f.came_due == 1
        assert await lease_all(f) == ["later"]

    run(body)
