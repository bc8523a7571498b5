"""Revisits queued apart from new URLs (issue 24, part 2): a tracked page whose next
visit came waits in its site's revisit list, and a lease takes a site's requests from
its revisits at the revisit share when it has new URLs queued too, from whichever has
requests otherwise; a retry waiting out its back-off is not a revisit. The contract
every frontier keeps (Redis in each seen-filter mode, memory, five shards), then what
Redis holds and what a sharded job does."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from scrapy.settings import Settings

from crawlfleet.exceptions import ConfigError
from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.memory import MemoryFrontier
from crawlfleet.frontier.records import Leased, Outgoing, Revisit, entry_revisit
from crawlfleet.frontier.sharded import JobFrontier, shard_of
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.settings.access import get_share
from tests.support.frontier import lease_all, out, site_in

KW: dict[str, Any] = {"lease_ms": 60000, "offer_size": 50}
BEAT: dict[str, Any] = {"status": "{}", "busy": True, "lease_ms": 60000}


async def holder_of(f: Any, site: str) -> Frontier | None:
    """The Redis frontier (shard) that holds *site*'s keys (None: in memory)."""
    if isinstance(f, JobFrontier):
        parts = await f.shards()
        return parts[shard_of(site, len(parts))]
    return f if isinstance(f, Frontier) else None


async def take(f: Any, node: str, want: int, site: str, per_site: int) -> list[Leased]:
    """Lease until *want* requests of *site* are leased to *node*, *per_site* a lease."""
    got: list[Leased] = []
    for _ in range(4 * want + 10):
        if len(got) >= want:
            break
        n = min(per_site, want - len(got))
        got += (await f.lease(node, n, [site], per_site=n, **KW)).entries
    assert len(got) == want, f"leased {len(got)} of {want}"
    return got


async def queue_revisits(f: Any, n: int, site: str = "a", tag: str = "") -> None:
    """Queue *n* revisits of *site* ("rv<tag><i>"): tracked pages whose next visit came
    (*site* has nothing else queued)."""
    before = (await f.counters()).get("revisits_queued", 0)
    await f.commit("n1", [out(f"rv{tag}{i}", site) for i in range(n)])
    leased = await take(f, "n1", n, site, n)
    kept = [Revisit(e.rid, 1, e.payload, new=True) for e in leased]
    assert (await f.commit("n1", revisits=kept)).revisited == n
    await asyncio.sleep(0.05)
    await f.reclaim_expired(limit=10 * n)
    assert (await f.counters()).get("revisits_queued") == before + n


def revisits_in(entries: list[Leased]) -> int:
    return sum(e.payload.startswith(b"rv") for e in entries)


@pytest.mark.parametrize(
    ("share", "per_site", "low", "high"), [(0.5, 10, 40, 60), (0.3, 1, 25, 35)]
)
def test_a_site_with_both_gives_its_revisits_about_the_share(
    run: Callable[..., Any], share: float, per_site: int, low: int, high: int
) -> None:
    async def body(f: Any) -> None:
        await queue_revisits(f, 150)
        await f.commit("n1", [out(f"new{i}") for i in range(150)])
        got = await take(f, "n2", 100, "a", per_site)
        assert low <= revisits_in(got) <= high
        # new URLs in their order, each request once
        new = [int(e.payload[3:]) for e in got if e.payload.startswith(b"new")]
        assert new == list(range(len(new))) and len({e.rid for e in got}) == 100
        c = await f.counters()
        assert (c["queued"], c["revisits_queued"]) == (200, 150 - revisits_in(got))

    run(body, revisit_share=share)


def test_share_0_takes_no_revisit_while_new_urls_wait_then_all_of_them(
    run: Callable[..., Any],
) -> None:
    async def body(f: Any) -> None:
        await queue_revisits(f, 20)
        await f.commit("n1", [out(f"new{i}") for i in range(30)])
        first = await take(f, "n2", 30, "a", 7)
        assert revisits_in(first) == 0
        # the share nobody uses goes to the other: the revisits come next, all of them
        rest = await take(f, "n2", 20, "a", 7)
        assert revisits_in(rest) == 20
        assert await lease_all(f, "n2") == [] and await f.offer(10) == []

    run(body, revisit_share=0)


def test_share_1_takes_no_new_url_while_revisits_wait_then_all_of_them(
    run: Callable[..., Any],
) -> None:
    async def body(f: Any) -> None:
        await queue_revisits(f, 20)
        await f.commit("n1", [out(f"new{i}", priority=p) for i, p in enumerate([0, 3, -2] * 10)])
        first = await take(f, "n2", 20, "a", 6)
        assert revisits_in(first) == 20
        rest = await take(f, "n2", 30, "a", 6)
        assert revisits_in(rest) == 0
        # priorities keep their meaning among new URLs
        prios = [[0, 3, -2][int(e.payload[3:]) % 3] for e in rest]
        assert prios == sorted(prios, reverse=True)

    run(body, revisit_share=1)


def test_a_site_with_one_kind_gives_all_of_it_whatever_the_share(run: Callable[..., Any]) -> None:
    async def body(f: Any) -> None:
        await queue_revisits(f, 12, "a")
        await f.commit("n1", [out(f"new{i}", "b") for i in range(12)])
        # share 0 (revisits only on "a") and share 1 (new URLs only on "b"): all given
        assert revisits_in(await take(f, "n2", 12, "a", 5)) == 12
        assert revisits_in(await take(f, "n2", 12, "b", 5)) == 0

    run(body, revisit_share=0)
    run(body, job="job2", revisit_share=1)


def test_a_due_retry_goes_to_the_new_urls_not_to_the_revisits(run: Callable[..., Any]) -> None:
    async def body(f: Any) -> None:
        await queue_revisits(f, 3)
        await f.commit("n1", [Outgoing(b"", "a", 0, b"retry", delay_ms=50)])
        await asyncio.sleep(0.1)
        await f.reclaim_expired()
        c = await f.counters()
        assert (c["queued"], c["revisits_queued"]) == (4, 3)
        # share 0: the new URLs first, and the retry is one of them
        assert (await f.lease("n2", 1, ["a"], per_site=1, **KW)).entries[0].payload == b"retry"
        home = await holder_of(f, "a")
        if home is not None:
            assert await home.client.llen(home.keys.revisits("a")) == 3
            assert await home.client.llen(home.keys.fifo("a")) == 0

    run(body, revisit_share=0)


def test_a_site_stays_offered_while_either_queue_has_requests(run: Callable[..., Any]) -> None:
    async def body(f: Any) -> None:
        await queue_revisits(f, 1)
        await f.commit("n1", [out("new0")])
        assert await f.offer(10) == ["a"]
        # share 0: the new URL first; then its revisit keeps it offered
        assert await lease_all(f, "n2", n=1) == ["new0"]
        assert await f.offer(10) == ["a"]
        assert revisits_in(await take(f, "n2", 1, "a", 1)) == 1
        assert await f.offer(10) == []
        # new URLs only: offered until they are gone
        await f.commit("n1", [out("new1"), out("new2")])
        assert await lease_all(f, "n2", n=1) == ["new1"]
        assert await f.offer(10) == ["a"]
        assert await lease_all(f, "n2", n=1) == ["new2"]
        assert await f.offer(10) == []

    run(body, revisit_share=0)


def test_a_dead_nodes_lease_of_a_revisit_comes_back_to_the_head_of_the_revisits(
    run: Callable[..., Any],
) -> None:
    async def body(f: Any) -> None:
        await queue_revisits(f, 4)
        await f.commit("n1", [out(f"new{i}") for i in range(4)])
        await f.heartbeat("dies", ttl_ms=50, **BEAT)
        lost = await take(f, "dies", 2, "a", 2)
        assert [e.payload for e in lost] == [b"rv0", b"rv1"]
        await asyncio.sleep(0.1)
        assert await f.reclaim_expired() == 2
        c = await f.counters()
        assert (c["queued"], c["revisits_queued"]) == (8, 4)
        # back among the revisits, before those that were queued after them
        again = await take(f, "n2", 4, "a", 4)
        assert [e.payload for e in again] == [b"rv0", b"rv1", b"rv2", b"rv3"]
        assert [e.rid for e in again[:2]] == [e.rid for e in lost]
        # a node that gives back what it holds: the same
        assert await f.release("n2", [(e.rid, e.site) for e in again[2:]]) == 2
        assert [e.payload for e in await take(f, "n3", 2, "a", 2)] == [b"rv2", b"rv3"]

    run(body, revisit_share=1)


def test_a_reset_removes_the_revisit_lists_and_credits(run: Callable[..., Any]) -> None:
    async def body(f: Any) -> None:
        await queue_revisits(f, 5)
        await f.commit("n1", [out(f"new{i}") for i in range(5)])
        await take(f, "n2", 3, "a", 1)  # both kinds left: the site's credit is kept
        home = await holder_of(f, "a")
        if home is not None:
            assert await home.client.exists(home.keys.revisits("a"), home.keys.credit) == 2
        await f.reset()
        if home is not None:
            assert await home.client.exists(home.keys.revisits("a"), home.keys.credit) == 0
        assert await lease_all(f, "n2") == []
        assert (await f.counters()).get("revisits_queued", 0) == 0

    run(body, revisit_share=0.5)


def test_the_marker_is_one_byte_of_the_stored_entry(run_redis: Callable[..., Any]) -> None:
    async def body(f: Frontier) -> None:
        await f.commit("n1", [out("p", priority=4), out("q")])
        a, b = (await f.lease("n1", 2, ["a"], per_site=2, **KW)).entries
        before = await f.client.hget(f.keys.req, a.rid)
        assert not entry_revisit(before)
        await f.commit("n1", revisits=[Revisit(a.rid, 60_000, b"p"), Revisit(b.rid, 1, b"q")])
        after = await f.client.hget(f.keys.req, a.rid)
        assert entry_revisit(after) and after == before.replace(b"\0", b".\0", 1)
        await asyncio.sleep(0.05)
        await f.reclaim_expired()
        assert await f.client.lrange(f.keys.revisits("a"), 0, -1) == [f"{b.rid}\0q".encode()]
        # leased again, marked; kept again, not marked twice
        again = (await f.lease("n1", 1, ["a"], per_site=1, **KW)).entries[0]
        stored = await f.client.hget(f.keys.req, again.rid)
        assert stored == f"{b.rid}.\0a\0q".encode()
        await f.commit("n1", revisits=[Revisit(again.rid, 60_000, b"q")])
        assert await f.client.hget(f.keys.req, again.rid) == stored

    run_redis(body)


def test_a_bad_share_is_refused(redis_server_url: str) -> None:
    client = make_client(redis_server_url)
    bad: Any
    for bad in (-0.1, 1.5, True, "0.5"):
        with pytest.raises(ValueError, match="revisit share"):
            MemoryFrontier("j", revisit_share=bad)
        with pytest.raises(ValueError, match="revisit share"):
            Frontier(client, JobKeys.of("p", "j"), revisit_share=bad)


def test_each_shard_shares_its_own_sites(redis_server_url: str, key_prefix: str) -> None:
    sites = [site_in(k, 3, "share") for k in range(3)]

    async def body() -> None:
        client = make_client(redis_server_url)
        try:
            f = JobFrontier(client, JobKeys.of(key_prefix, "job"), shards=3, revisit_share=0.25)
            for s in sites:
                await queue_revisits(f, 20, s, tag=s)
                await f.commit("n1", [out(f"new-{s}-{i}", s) for i in range(20)])
            parts = await f.shards()
            for k, (s, part) in enumerate(zip(sites, parts, strict=True)):
                assert shard_of(s, 3) == k
                assert await client.llen(part.keys.revisits(s)) == 20
                assert (await part.counters())["revisits_queued"] == 20
            got: dict[str, list[Leased]] = {s: [] for s in sites}
            for _ in range(200):
                r = await f.lease("n2", 6, sites, per_site=2, **KW)
                for e in r.entries:
                    got[e.site].append(e)
                if sum(len(v) for v in got.values()) == 120:
                    break
            for s in sites:
                assert len(got[s]) == 40  # every request of every site
                assert revisits_in(got[s][:20]) == 5  # a quarter while both had some
        finally:
            await client.aclose()

    asyncio.run(body())


@pytest.mark.parametrize("bad", [-0.1, 1.01, "half", True])
def test_the_share_setting_is_a_number_from_0_to_1_or_a_one_line_error(bad: Any) -> None:
    assert (
        get_share(Settings({"CRAWLFLEET_REVISIT_SHARE": "0.25"}), "CRAWLFLEET_REVISIT_SHARE")
        == 0.25
    )
    with pytest.raises(ConfigError) as raised:
        get_share(Settings({"CRAWLFLEET_REVISIT_SHARE": bad}), "CRAWLFLEET_REVISIT_SHARE")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("CRAWLFLEET_REVISIT_SHARE must be a number from 0 to 1")
