"""The wire form of a commit's requests: one packed argument (a MessagePack array of the
sites, then the requests: ``pack_requests``, read by ``_commit.lua``). Requests of every
kind go through it as before; a packed argument that is not as it should be is refused
whole, with a message saying what is wrong, before the script writes anything."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from redis.exceptions import ResponseError

from crawlfleet.frontier.client import Frontier, pack_requests
from crawlfleet.frontier.records import CommitBatch, Outgoing
from crawlfleet.redis.keys import JobKeys


def _batch(requests: list[Outgoing]) -> CommitBatch:
    return CommitBatch("n1", requests, (), (), 0, "")


async def _raw_commit(f: Frontier, batch: CommitBatch, packed: Any) -> Any:
    """commit.lua run on *batch*'s keys and arguments, its packed requests replaced by
    *packed*."""
    seen_keys, seen_args = await f._seen_keys()
    keys, args = f._commit_call(batch)(seen_keys, seen_args)
    return await f.scripts("commit", keys, [*args[:-1], packed])


def test_requests_of_every_kind_go_through_the_packed_argument(
    run_redis: Callable[..., Any],
) -> None:
    async def fn(f: Frontier) -> None:
        requests = [
            Outgoing(b"fp-plain", "a.example", 0, b"\x01plain"),
            Outgoing(b"fp-prio", "b.example", 7, b"\x01prio"),
            Outgoing(b"fp-low", "a.example", -3, b"\x01low"),
            Outgoing(b"fp-wait", "c.example", 0, b"\x01wait", delay_ms=60_000),
            Outgoing(b"", "a.example", 0, b"\x00\xff binary \r\n payload"),  # no filter
            Outgoing(b"fp-plain", "b.example", 0, b"\x01again"),  # a duplicate
        ]
        result = await f.commit("n1", requests)
        assert (result.queued, result.duplicates, result.duplicate_indexes) == (5, 1, [5])
        counters = await f.counters()
        assert counters["queued"] == 4 and counters["waiting"] == 1
        leased = await f.lease("n1", 10, ["a.example", "b.example"], **_OPTIONS)
        # the binary payload comes back byte for byte
        assert sorted(e.payload for e in leased.entries) == sorted(
            [b"\x01prio", b"\x01plain", b"\x00\xff binary \r\n payload", b"\x01low"]
        )

    run_redis(fn)


_OPTIONS: Any = {"lease_ms": 60000, "per_site": 10, "offer_size": 50}

_MALFORMED = [
    (b"\xc1 not msgpack", "not a MessagePack array"),
    (b"\x92\xa1a", "not a MessagePack array"),  # cut short
    (pack_requests(["a.example", b"fp", 1]), "3 items packed, not 4 (1 sites, 1 requests)"),
    (pack_requests(["a.example", b"fp", 2, b"p"]), "request 1 is not"),  # no site 2
    (pack_requests(["a.example", b"fp", 0, b"p"]), "request 1 is not"),
    (pack_requests(["a.example", b"fp", "1:x:0", b"p"]), "request 1 is not"),
    (pack_requests(["a.example", 5, 1, b"p"]), "request 1 is not"),  # fp not a string
    (pack_requests([5, b"fp", 1, b"p"]), "site 1 is not a string"),
]


@pytest.mark.parametrize(("packed", "said"), _MALFORMED)
def test_a_malformed_packed_argument_is_refused_before_anything_is_written(
    run_redis: Callable[..., Any], packed: bytes, said: str
) -> None:
    async def fn(f: Frontier) -> None:
        batch = _batch([Outgoing(b"fp", "a.example", 0, b"\x01p")])
        with pytest.raises(ResponseError, match="CFBADREQUESTS") as caught:
            await _raw_commit(f, batch, packed)
        assert said in str(caught.value)
        keys: JobKeys = f.keys
        assert await f.client.exists(keys.counters, keys.seen, keys.fifo("a.example")) == 0
        # the same batch, packed as it should be, is queued
        assert (await f.commit("n1", batch.requests)).queued == 1

    run_redis(fn)
