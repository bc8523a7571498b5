"""A node's round in one call (``commit_lease``): exactly what a commit, then a lease,
do, on every frontier; on a job of several shards a commit done in part leases
nothing and loses nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from crawlfleet.frontier.base import PartialCommit
from crawlfleet.frontier.records import CommitBatch, LeaseAsk, LeaseOptions, Outgoing
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from tests.support.frontier import out, shard_down, site_in

OPTIONS: LeaseOptions = {"lease_ms": 60000, "per_site": 2, "offer_size": 50}


def _summary(result: Any) -> tuple[Any, ...]:
    """What a round's results say, without what differs from one job to another (the
    epoch, the clock)."""
    committed, leased = result
    entries = [(e.site, e.payload, e.slot_us) for e in leased.entries]
    return (
        (committed.queued, committed.duplicates, committed.acked),
        committed.duplicate_indexes,
        entries,
        leased.offer,
        leased.queued,
        leased.leased,
    )


async def _round(f: Any, *, combined: bool) -> tuple[Any, ...]:
    """Queue a first batch, lease part of it, then one round: acknowledge two leases
    (and one of another node), send new links (a duplicate among them, one that
    bypasses the seen-filter, one of a new site) and lease again; in one call or two."""
    await f.commit("n1", [out(f"https://a/{i}", "a") for i in range(4)] + [out("https://b/0", "b")])
    first = await f.lease("n1", 3, ["a", "b"], **OPTIONS)
    rids = [e.rid for e in first.entries]
    other = await f.lease("n2", 1, ["a"], **OPTIONS)
    links = [
        out("https://a/9", "a"),
        out("https://a/0", "a"),  # seen
        out("https://c/0", "c"),  # a site that comes with this round
        Outgoing(b"", "b", 0, b"https://b/again"),  # bypasses the seen-filter
    ]
    epoch = (await f.commit("n1")).epoch
    acks = [*rids[:2], other.entries[0].rid]  # the last is n2's: not acknowledged
    batch = CommitBatch("n1", links, acks, (), 0, epoch)
    ask = LeaseAsk(5, ["a", "b", "c"], OPTIONS)
    if combined:
        result = await f.commit_lease(batch, ask)
    else:
        committed = await f._commit(batch)
        result = (committed, await f.lease("n1", ask.n, ask.sites, **ask.options))
    counters = await f.counters()
    figures = {k: counters.get(k, 0) for k in ("queued", "leased", "acked", "enqueued")}
    return (*_summary(result), figures)


def test_a_round_in_one_call_does_what_a_commit_then_a_lease_do(
    run: Callable[..., Any],
) -> None:
    async def two(f: Any) -> tuple[Any, ...]:
        return await _round(f, combined=False)

    async def one(f: Any) -> tuple[Any, ...]:
        return await _round(f, combined=True)

    apart = run(two, job="apart")
    together = run(one, job="together")
    assert together == apart
    (queued, dups, acked), dup_idx, entries, *_rest, figures = together
    assert (queued, dups, acked, dup_idx) == (3, 1, 2, [1])
    # the lease saw what the commit queued: the new site's link among its requests
    assert ("c", b"https://c/0", None) in entries
    assert figures["leased"] == 2 + len(entries)  # n1's third lease, n2's, this round's


def test_a_round_that_leases_nothing_still_commits(run: Callable[..., Any]) -> None:
    async def body(f: Any) -> None:
        r = await f.commit("n1", [out("https://a/0", "a")])
        batch = CommitBatch("n1", [out("https://a/1", "a")], (), (), 0, r.epoch)
        committed, leased = await f.commit_lease(batch, LeaseAsk(3, ["empty"], OPTIONS))
        assert committed.queued == 1
        assert leased is not None and leased.entries == []
        assert (await f.counters())["queued"] == 2

    run(body)


def test_a_round_whose_commit_is_done_in_part_leases_nothing_and_loses_nothing(
    redis_server_url: str, key_prefix: str
) -> None:
    keys = JobKeys.of(key_prefix, "job")
    a, b, d = site_in(0, 3, "a"), site_in(1, 3, "b"), site_in(2, 3, "d")

    async def body() -> None:
        client = make_client(redis_server_url)
        try:
            f = JobFrontier(client, keys, shards=3)
            await f.commit("n1", [out(f"https://{a}/", a), out(f"https://{d}/", d)])
            page = (await f.lease("n1", 1, [a], **OPTIONS)).entries[0].rid
            down = shard_down(f, 1)
            batch = [out(f"https://{b}/link", b), Outgoing(b"", d, 0, b"a retry of d")]
            ask = LeaseAsk(5, [a, d], OPTIONS)
            with pytest.raises(PartialCommit) as raised:
                await f.commit_lease(CommitBatch("n1", batch, [page], (), 0, ""), ask)
            part = raised.value
            assert part.requests == {1} and part.acks == set()
            await down.aclose()
            f._parts = None  # the master is back
            counters = await f.counters()
            assert counters["leased"] == 1  # only the page: the round leased nothing
            rest = [r for i, r in enumerate(batch) if i not in part.requests]
            committed, leased = await f.commit_lease(
                CommitBatch("n1", rest, [page], (), 0, ""), LeaseAsk(5, [a, b, d], OPTIONS)
            )
            assert (committed.queued, committed.acked) == (1, 1)
            assert leased is not None
            got = [e.payload for e in leased.entries]
            while more := (await f.lease("n1", 5, [b, d], **OPTIONS)).entries:
                got += [e.payload for e in more]
            # each request queued once, leased once: the link, the retry, d's page
            want = [f"https://{b}/link".encode(), b"a retry of d", f"https://{d}/".encode()]
            assert sorted(got) == sorted(want)
            counters = await f.counters()
            assert (counters["enqueued"], counters["queued"], counters["acked"]) == (4, 0, 1)
        finally:
            await client.aclose()

    asyncio.run(body())
