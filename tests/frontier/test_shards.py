"""A job over several shards on one Redis: its shard count is fixed when it is created,
its sites spread over the shards' hash tags, every shard is leased from, and what reads
the job (counters, snapshot, reset) sees all of it. The frontier contract itself runs on
a sharded job in test_frontier_scripts.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis as sync_redis
from redis.crc import key_slot

from crawlfleet.exceptions import CommandFailed, ConfigError
from crawlfleet.fleet.snapshot import snapshot
from crawlfleet.frontier.base import PartialCommit
from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.config import validate_job_name
from crawlfleet.frontier.records import Outgoing
from crawlfleet.frontier.sharded import JobFrontier, _shares, interleave, shard_of
from crawlfleet.redis.connection import REDIS_ERRORS, make_client
from crawlfleet.redis.keys import JobKeys, shard_tag
from tests.support.frontier import out, shard_down, site_in, sites_in

KW: dict[str, Any] = {"lease_ms": 60000, "offer_size": 50}


def run(redis_url: str, body: Callable[[Any], Awaitable[None]]) -> None:
    async def main() -> None:
        client = make_client(redis_url)
        try:
            await body(client)
        finally:
            await client.aclose()

    asyncio.run(main())


def sites_in_every_shard(shards: int, per_shard: int = 2) -> list[str]:
    """Site names, *per_shard* of them in each shard."""
    return [site for k in range(shards) for site in sites_in(k, shards, n=per_shard)]


async def lease_everything(f: JobFrontier, node: str = "n1") -> list[Any]:
    """Lease until the job has nothing queued, as a node does (offer from each reply)."""
    got: list[Any] = []
    offer = await f.offer(50)
    for _ in range(50):
        if not offer:
            break
        r = await f.lease(node, 7, offer, per_site=2, **KW)
        got += r.entries
        offer = r.offer
    return got


def test_a_sites_shard_is_stable_and_shards_share_the_work() -> None:
    # CRC-32 of the name: the same in every process and version
    assert [shard_of(s, 4) for s in ("a", "big", "127.0.0.1")] == [3, 1, 0]
    assert shard_of("anything", 1) == 0
    counts = [0] * 8
    for i in range(8000):
        counts[shard_of(f"host{i}.example.com", 8)] += 1
    assert min(counts) > 900 and max(counts) < 1100, counts
    assert interleave([["a", "b", "c"], [], ["x"]], 3) == ["a", "x", "b"]


def test_shard_tags_spread_evenly_over_the_slots() -> None:
    for job, shards in (("job", 3), ("news-2026", 12), ("x", 64)):
        slots = sorted(key_slot(JobKeys("p", job, k, shards).tag.encode()) for k in range(shards))
        # one shard in each N-th of the slots: 3 masters get 4 shards each of 12
        assert sorted(s * shards // 16384 for s in slots) == list(range(shards)), slots
    assert JobKeys("p", "job", 0, 3).tag == "{job}"
    assert shard_tag("job", 1, 3).startswith("job#1")
    assert shard_tag("job", 1, 3) == shard_tag("job", 1, 3)  # stable (and cached)


def test_a_lease_asks_each_shard_for_its_share() -> None:
    assert _shares(100, [8, 8, 0, 16]) == [25, 25, 0, 50]
    assert _shares(7, [1, 2, 0]) == [3, 4, 0]  # all of it, in proportion
    assert _shares(2, [3, 1, 0, 2]) == [1, 1, 0, 0]  # never more than asked for
    assert _shares(4, [1, 1, 1, 10]) == [1, 1, 1, 1]


def test_job_names_may_not_hold_the_shard_separator() -> None:
    with pytest.raises(ConfigError, match="'#'"):
        validate_job_name("news#1")


def test_a_job_keeps_the_shard_count_it_was_created_with(
    redis_server_url: str, key_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    keys = JobKeys.of(key_prefix, "job")
    sites = sites_in_every_shard(3)

    async def body(client: Any) -> None:
        first = JobFrontier(client, keys, shards=3)
        await first.register_job()
        assert await client.get(keys.shards_key) == b"3"
        # a node configured otherwise joins the job as it is, and says so
        with caplog.at_level(logging.WARNING):
            second = JobFrontier(client, keys, shards=5)
            await second.commit("n2", [out(f"https://{s}/", s) for s in sites])
        assert "has 3 shard(s)" in caplog.text and "= 5 is ignored" in caplog.text
        assert len(await second.shards()) == 3
        # every site went to its shard's own keys, and the first object leases them all
        for k in range(3):
            assert await client.zcard(keys.in_shard(k, 3).sites) == 2
        got = await lease_everything(first)
        assert sorted(e.site for e in got) == sorted(sites)
        assert {e.rid.split(":")[0] for e in got} == {"0", "1", "2"}

    run(redis_server_url, body)


def test_a_job_from_before_shards_stays_one_shard(redis_server_url: str, key_prefix: str) -> None:
    keys = JobKeys.of(key_prefix, "old")

    async def body(client: Any) -> None:
        await Frontier(client, keys).commit("n1", [out("https://a/", "a"), out("https://b/", "b")])
        f = JobFrontier(client, keys, shards=4)
        assert len(await f.shards(create=True)) == 1
        assert await client.get(keys.shards_key) == b"1"
        assert len(await lease_everything(f)) == 2

    run(redis_server_url, body)


def test_a_bad_shard_count_is_one_clear_error(redis_server_url: str, key_prefix: str) -> None:
    keys = JobKeys.of(key_prefix, "job")

    async def body(client: Any) -> None:
        await client.set(keys.shards_key, "lots")
        with pytest.raises(CommandFailed, match=r"shard count .* is 'lots', not a number"):
            await JobFrontier(client, keys).counters()

    run(redis_server_url, body)


def test_reading_a_job_creates_no_shard_count(redis_server_url: str, key_prefix: str) -> None:
    keys = JobKeys.of(key_prefix, "job")

    async def body(client: Any) -> None:
        f = JobFrontier(client, keys, shards=3)
        assert await f.counters() == {} and await f.offer(10) == []
        assert await client.get(keys.shards_key) is None
        await f.commit("n1", [out("https://a/", "a")])
        assert await client.get(keys.shards_key) == b"3"

    run(redis_server_url, body)


def test_a_shard_with_nothing_offered_joins_the_next_offer(
    redis_server_url: str, key_prefix: str
) -> None:
    keys = JobKeys.of(key_prefix, "job")
    a, b = sites_in_every_shard(2, per_shard=1)

    async def body(client: Any) -> None:
        f = JobFrontier(client, keys, shards=2)
        await f.commit("n1", [out(f"https://{a}/{i}", a) for i in range(3)])
        offer = await f.offer(10)
        assert offer == [a]
        # the other shard gets work from another node: the next lease reply offers it
        await JobFrontier(client, keys).commit("n2", [out(f"https://{b}/", b)])
        r = await f.lease("n1", 1, offer, per_site=1, **KW)
        assert [e.site for e in r.entries] == [a] and sorted(r.offer) == sorted([a, b])
        assert r.queued == 3 and r.leased == 1
        r = await f.lease("n1", 4, r.offer, per_site=4, **KW)
        assert sorted(e.site for e in r.entries) == [a, a, b]

    run(redis_server_url, body)


def test_a_lease_calls_a_few_shards_and_every_shard_gets_its_turn(
    redis_server_url: str, key_prefix: str
) -> None:
    keys = JobKeys.of(key_prefix, "job")
    sites = sites_in_every_shard(8, per_shard=10)

    async def body(client: Any) -> None:
        f = JobFrontier(client, keys, shards=8)
        await f.commit("n1", [out(f"https://{s}/{i}", s) for s in sites for i in range(20)])
        offer = await f.offer(32)
        assert len(offer) == 32 and len({shard_of(s, 8) for s in offer}) == 4
        turns: list[set[str]] = []
        for _ in range(8):
            r = await f.lease("n1", 64, offer, per_site=2, lease_ms=60000, offer_size=32)
            turns.append({e.rid.split(":")[0] for e in r.entries})
            assert len(r.entries) == 64
            offer = r.offer
        assert all(len(t) == 4 for t in turns)  # 4 shards' sites in each offer ...
        assert set().union(*turns) == {str(k) for k in range(8)}  # ... all in turn
        assert r.queued == len(sites) * 20 - 8 * 64 and r.leased == 8 * 64

    run(redis_server_url, body)


def test_paced_shards_are_tried_once_then_the_lease_waits(
    redis_server_url: str, key_prefix: str
) -> None:
    keys = JobKeys.of(key_prefix, "job")
    sites = sites_in_every_shard(4, per_shard=1)

    async def body(client: Any) -> None:
        f = JobFrontier(client, keys, shards=4)
        await f.commit("n1", [out(f"https://{s}/{i}", s) for s in sites for i in range(5)])
        paced: dict[str, Any] = {"horizon_us": 100_000}
        offer = await f.offer(32)
        r = await f.lease("n1", 8, offer, per_site=8, intervals=[1_000_000] * 4, **paced, **KW)
        assert len(r.entries) == 4  # one slot of each site, the next ones a second away
        # each slot on its own shard's clock (each its own Redis, in production)
        assert {e.clock for e in r.entries} == set(r.clocks) == {"0", "1", "2", "3"}
        assert all(abs(now - r.now_us) < 1_000_000 for now in r.clocks.values())
        tries = 0
        while True:  # a node leases again while the reply says so
            tries += 1
            r = await f.lease(
                "n1", 8, r.offer, per_site=8, intervals=[1_000_000] * 4, **paced, **KW
            )
            assert r.entries == []
            if r.ready_in_us > 0 or tries > 4:
                break
        assert tries == 1 and 800_000 < r.ready_in_us <= 1_000_000

    run(redis_server_url, body)


def test_what_reads_a_job_sees_every_shard(redis_server_url: str, key_prefix: str) -> None:
    keys = JobKeys.of(key_prefix, "job")
    sites = sites_in_every_shard(3)

    async def body(client: Any) -> None:
        f = JobFrontier(client, keys, shards=3)
        await f.commit("n1", [out(f"https://{s}/{i}", s) for s in sites for i in range(i_of(s))])
        queued = sum(i_of(s) for s in sites)
        got = await f.lease("n1", 4, await f.offer(50), per_site=1, **KW)
        await f.heartbeat("n1", ttl_ms=60000, status="{}", busy=True, lease_ms=60000)
        counters = await f.counters()
        assert counters["queued"] == queued - 4 and counters["leased"] == 4
        assert counters["enqueued"] == queued
        snap = await snapshot(client, keys)
        assert (snap.queued, snap.leased, snap.sites) == (queued - 4, 4, len(sites))
        assert snap.shards == 3 and snap.to_json()["shards"] == 3
        assert sorted(snap.top_sites) == sorted(
            (s, i_of(s) - sum(e.site == s for e in got.entries)) for s in sites
        )
        assert list(snap.nodes) == ["n1"] and snap.overdue_leases == 0
        # a dead node's leases come back from every shard
        await f.heartbeat("n1", ttl_ms=1, status="{}", busy=False, lease_ms=1)
        await asyncio.sleep(0.05)
        assert await JobFrontier(client, keys).reclaim_expired() == 4
        assert (await f.counters())["queued"] == queued

    run(redis_server_url, body)


def i_of(site: str) -> int:
    """How many requests the test queues for *site* (2 to 4)."""
    return 2 + len(site) % 3


def test_reset_deletes_every_key_of_every_shard(redis_server_url: str, key_prefix: str) -> None:
    keys = JobKeys.of(key_prefix, "job")
    sites = sites_in_every_shard(3)
    plain = sync_redis.Redis.from_url(redis_server_url)

    async def body(client: Any) -> None:
        f = JobFrontier(client, keys, shards=3)
        await f.register_job()
        await f.commit("n1", [out(f"https://{s}/", s) for s in sites])
        got = await lease_everything(f)
        await f.commit("n1", acks=[e.rid for e in got[:2]])
        await f.heartbeat("n1", ttl_ms=60000, status="{}", busy=True, lease_ms=60000)
        tag = keys.in_shard(2, 3).tag.encode()
        assert any(tag in k for k in plain.scan_iter(match=f"{key_prefix}:*"))
        assert await f.reset() > 0
        assert list(plain.scan_iter(match=f"{key_prefix}:*")) == []
        # created again, the job takes the count of whoever creates it now
        g = JobFrontier(client, keys, shards=2)
        await g.register_job()
        assert len(await g.shards()) == 2

    try:
        run(redis_server_url, body)
    finally:
        plain.close()


def test_a_commit_done_in_part_says_what_was_done(redis_server_url: str, key_prefix: str) -> None:
    keys = JobKeys.of(key_prefix, "job")
    a, b, d = site_in(0, 3, "a"), site_in(1, 3, "b"), site_in(2, 3, "d")

    async def body(client: Any) -> None:
        f = JobFrontier(client, keys, shards=3)
        await f.commit("n1", [out(f"https://{a}/", a)])
        page = (await f.lease("n1", 5, [a], per_site=5, **KW)).entries[0].rid
        down = shard_down(f, 1)
        retry = Outgoing(b"", d, 0, b"a retry of d")  # bypasses the seen-filter
        batch = [out(f"https://{b}/link", b), retry]
        with pytest.raises(PartialCommit) as raised:
            await f.commit("n1", batch, acks=[page])
        part = raised.value
        # shard 2 queued its request; the page is not acknowledged while its link waits
        assert part.requests == {1} and part.acks == set() and part.result.queued == 1
        assert isinstance(part, REDIS_ERRORS)
        await down.aclose()
        f._parts = None  # the master is back
        # the node sends the rest again: nothing twice, nothing lost
        rest = [r for i, r in enumerate(batch) if i not in part.requests]
        done = await f.commit("n1", rest, acks=[page])
        assert (done.queued, done.acked) == (1, 1)
        counters = await f.counters()
        assert (counters["enqueued"], counters["queued"], counters["acked"]) == (3, 2, 1)

    run(redis_server_url, body)


def test_a_lease_keeps_what_the_shards_that_answer_leased(
    redis_server_url: str, key_prefix: str
) -> None:
    keys = JobKeys.of(key_prefix, "job")
    sites = [site_in(k, 3, "s") for k in range(3)]

    async def body(client: Any) -> None:
        f = JobFrontier(client, keys, shards=3)
        await f.commit("n1", [out(f"https://{s}/{i}", s) for s in sites for i in range(3)])
        await f.shards()
        down = [shard_down(f, 1)]
        try:
            offer = await f.offer(10)  # without shard 1's sites: it does not answer
            assert sorted(offer) == sorted([sites[0], sites[2]])
            offer.append(sites[1])  # as a lease before the fail-over would have offered
            r = await f.lease("n1", 9, offer, per_site=3, **KW)
            assert sorted(e.site for e in r.entries) == sorted([sites[0], sites[2]] * 3)
            assert sites[1] not in r.offer  # until shard 1 answers again
            assert (await JobFrontier(client, keys).counters())["leased"] == 6
            down += [shard_down(f, 0), shard_down(f, 2)]
            with pytest.raises(REDIS_ERRORS):  # nothing answers: an outage
                await f.lease("n1", 9, offer, per_site=3, **KW)
        finally:
            for c in down:
                await c.aclose()

    run(redis_server_url, body)


def test_a_small_lease_reaches_the_shards_that_are_ready(
    redis_server_url: str, key_prefix: str
) -> None:
    """Three shards' sites are paced and not ready, one shard's are: a node that wants
    one request at a time finds it within a few leases, and never spins."""
    keys = JobKeys.of(key_prefix, "job")
    paced = [site_in(k, 4, "p") for k in range(3)]
    free = site_in(3, 4, "f")

    async def body(client: Any) -> None:
        f = JobFrontier(client, keys, shards=4)
        await f.commit("n1", [out(f"https://{s}/{i}", s) for s in [*paced, free] for i in range(3)])
        for s in paced:  # their next slot is 10 s away
            await f.lease("n1", 1, [s], per_site=1, intervals=[10_000_000], **KW)
        offer = await f.offer(8)
        got: list[str] = []
        leases = 0
        while leases < 8:
            leases += 1
            gaps = [0 if s == free else 10_000_000 for s in offer]
            r = await f.lease("n1", 1, offer, per_site=1, intervals=gaps, **KW)
            got += [e.site for e in r.entries]
            if got:
                break
            assert r.ready_in_us >= 0
            offer = r.offer
        assert got == [free] and leases <= 4

    run(redis_server_url, body)
