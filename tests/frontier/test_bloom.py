"""The Bloom seen-filter on a real Redis: false-positive rate on 1M+ URLs, growth."""

from __future__ import annotations

import asyncio
import os

import pytest

from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.records import SeenConfig
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys

BATCH = 10_000


@pytest.mark.slow
def test_false_positive_rate_within_target_while_layers_grow(
    redis_server_url: str, key_prefix: str
) -> None:
    target = 1e-3
    inserted, probes = 1_000_000, 1_000_000

    async def body() -> tuple[int, int, list[bool], float]:
        client = make_client(redis_server_url)
        f = Frontier(
            client,
            JobKeys.of(key_prefix, "bloom"),
            SeenConfig("bloom", bloom_capacity=200_000, bloom_error_rate=target),
        )
        try:
            first = [os.urandom(16) for _ in range(1000)]
            assert await f.seen_check(first, add=True) == [False] * 1000
            for _ in range(0, inserted - 1000, BATCH):
                await f.seen_check([os.urandom(16) for _ in range(BATCH)], add=True)
            # everything inserted is still seen, in whichever layer it is
            again = await f.seen_check(first, add=False)
            hits = 0
            for _ in range(0, probes, BATCH):
                hits += sum(await f.seen_check([os.urandom(16) for _ in range(BATCH)], add=False))
            meta = {k.decode(): float(v) for k, v in (await client.hgetall(f.keys.bloom)).items()}
            layers = int(meta["layers"])
            nbytes = sum(
                [int(await client.strlen(f.keys.bloom_layer(i))) for i in range(1, layers + 1)]
            )
            return hits, layers, again, nbytes / inserted
        finally:
            await client.aclose()

    hits, layers, again, bytes_per_url = asyncio.run(body())
    assert all(again)  # no false negatives
    # 200k + 400k + 800k capacity: three layers for 1M URLs, each within its capacity
    assert layers == 3
    rate = hits / probes
    assert rate <= target, f"measured false-positive rate {rate} above target {target}"
    # 1.4M URLs of capacity for 1M: under 3.5 bytes per URL (2.1 when sized right)
    assert bytes_per_url < 3.5


def test_a_new_layer_is_added_when_the_last_is_full(redis_server_url: str, key_prefix: str) -> None:
    async def body() -> dict[str, str]:
        client = make_client(redis_server_url)
        seen = SeenConfig("bloom", bloom_capacity=1000, bloom_error_rate=1e-3)
        a = Frontier(client, JobKeys.of(key_prefix, "grow"), seen)
        b = Frontier(client, JobKeys.of(key_prefix, "grow"), seen)  # another node
        try:
            await a.seen_check([os.urandom(16) for _ in range(500)], add=True)
            await b.seen_check([os.urandom(16) for _ in range(2000)], add=True)
            # a's view of the layers is stale now: it must still check every layer
            known = [os.urandom(16) for _ in range(100)]
            await b.seen_check(known, add=True)
            assert await a.seen_check(known, add=False) == [True] * 100
            raw = await client.hgetall(a.keys.bloom)
            return {k.decode(): v.decode() for k, v in raw.items()}
        finally:
            await client.aclose()

    meta = asyncio.run(body())
    assert int(meta["layers"]) == 2
    assert int(meta["n1"]) == 1000 and int(meta["cap2"]) == 2000
    assert int(meta["k2"]) > int(meta["k1"])  # the new layer is tighter
    assert int(meta["n2"]) <= 1600
