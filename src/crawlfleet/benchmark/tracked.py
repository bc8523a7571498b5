"""What one tracked URL of a continuous crawl costs Redis: run with
``python -m crawlfleet.benchmark.tracked [--urls N]`` (docs/scaling.md).

It starts a Redis of its own (127.0.0.1, nothing written to disk, so that the figures
are this run's alone), queues *urls* requests over SITES sites through the commit
script as nodes do, each encoded by the nodes' own codec from a URL of about 60
characters with a meta holding a revisit state of 11 fields (as a node keeps it under
``crawlfleet_revisit``), leases them all, and commits each as a new :class:`Revisit`
(waiting a day), in batches of 500. Bytes per tracked URL: Redis's ``used_memory``
after, less before the first request, over *urls*; and ``MEMORY USAGE`` of the keys that
hold them (the req hash, the waiting sorted set; the leases sorted set and owner hash,
which hold leases in flight only). The seen-filter is left out (the requests bypass
it): its cost per URL is its own (exact or Bloom mode). Then a node that holds
DEAD_LEASES leases dies, and the reclaim that returns them is timed: Redis's own time
(``INFO commandstats``, its scripts), the best of RECLAIMS such deaths.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

import scrapy

from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.records import Outgoing, Revisit
from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.redis.localcluster import RedisProcess

__all__ = ["measure_tracked", "payload_of"]

SITES = 1000
BATCH = 500
DAY_MS = 86_400_000
#: Leases a dying node holds, and how many times one dies, in the reclaim's measure.
DEAD_LEASES = 20
RECLAIMS = 5


def payload_of(
    i: int, codec: RequestCodec, *, runtime_meta: bool = False, item_keys: int = 0
) -> bytes:
    """The stored form of tracked request *i*: a URL of about 60 characters and the
    revisit state a node keeps in its meta (*runtime_meta*: with the keys Scrapy's
    downloader adds too, as a request re-serialized without removing them would be;
    *item_keys*: with the keys of that many stored items, as a node keeps them while an
    item store marks gone pages)."""
    url = f"https://www.shop{i % SITES:04d}.example.com/products/item-{i:08d}.html"
    state = {
        "visits": 3,
        "interval": 86400,
        "due": 1_767_225_600 + i,
        "last": 1_767_225_612 + i,
        "etag": f'"{i:08x}-5f3c2a1b"',
        "lm": "Wed, 21 Oct 2025 07:28:00 GMT",
        "fp": f"{i * 2654435761 % 2**64:016x}{i:016x}",
        "first": 1_760_000_000 + i,
        "changed": 1_765_000_000 + i,
        "version": 2,
        "gone": 0,
    }
    if item_keys:
        state["keys"] = [hashlib.sha1(b"%d/%d" % (i, k)).digest() for k in range(item_keys)]
    meta: dict[str, Any] = {"depth": 2, "crawlfleet_revisit": state}
    if runtime_meta:
        meta |= {
            "download_timeout": 180.0,
            "download_slot": f"www.shop{i % SITES:04d}.example.com",
            "download_latency": 0.2345678,
        }
    return codec.encode(scrapy.Request(url, meta=meta))


async def _used(client: Any) -> int:
    return int((await client.info("memory"))["used_memory"])


async def measure_tracked(
    url: str, urls: int, *, runtime_meta: bool = False, item_keys: int = 0
) -> dict[str, Any]:
    """Track *urls* requests in the (empty) Redis at *url*; the figures per URL."""
    client = make_client(url)
    try:
        f = Frontier(client, JobKeys.of("cfmem", "tracked"))
        codec = RequestCodec(None)
        await f.commit("warm", [])  # scripts loaded, counters created
        before = await _used(client)
        sizes = 0
        for start in range(0, urls, BATCH):
            batch = []
            for i in range(start, min(urls, start + BATCH)):
                payload = payload_of(i, codec, runtime_meta=runtime_meta, item_keys=item_keys)
                sizes += len(payload)
                site = f"www.shop{i % SITES:04d}.example.com"
                batch.append(Outgoing(b"", site, 0, payload))
            await f.commit("n1", batch)
        queued = await _used(client)
        kept = 0
        while kept < urls:
            offer = await f.offer(32)
            r = await f.lease("n1", BATCH, offer, lease_ms=600_000, per_site=BATCH, offer_size=32)
            if not r.entries:
                break
            revisits = [Revisit(e.rid, DAY_MS, e.payload, new=True) for e in r.entries]
            kept += (await f.commit("n1", revisits=revisits)).revisited
        after = await _used(client)
        k = f.keys
        usage = {
            name: int(await client.memory_usage(key, samples=0) or 0)
            for name, key in (
                ("req", k.req),
                ("waiting", k.waiting),
                ("leases", k.leases),
                ("owner", k.owner),
            )
        }
        counters = await f.counters()
        reclaim_ms = min([await _dead_node_reclaim_ms(f, i) for i in range(RECLAIMS)])
        return {
            "urls": urls,
            "tracked": counters.get("tracked", 0),
            "payload_bytes": round(sizes / urls, 1),
            "queued_bytes_per_url": round((queued - before) / urls, 1),
            "tracked_bytes_per_url": round((after - before) / urls, 1),
            "by_key_bytes_per_url": {name: round(n / urls, 1) for name, n in usage.items()},
            "gb_per_10M_tracked": round((after - before) * 10_000_000 / urls / 1e9, 2),
            "dead_node_reclaim_redis_ms": round(reclaim_ms, 2),
        }
    finally:
        await client.aclose()


async def _dead_node_reclaim_ms(f: Frontier, n: int) -> float:
    """Redis's time (ms) of the reclaim that returns the DEAD_LEASES leases of a node
    that died (the *n*-th), its scripts' time as ``INFO commandstats`` counts it."""
    site = "dead.example.com"
    await f.commit("n1", [Outgoing(b"", site, 0, b"x%d" % i) for i in range(DEAD_LEASES)])
    node = f"dies{n}"
    beat: dict[str, Any] = {"status": "{}", "busy": True, "lease_ms": 600_000}
    await f.heartbeat(node, ttl_ms=100, **beat)
    held = await f.lease(
        node, DEAD_LEASES, [site], lease_ms=600_000, per_site=DEAD_LEASES, offer_size=8
    )
    await asyncio.sleep(0.2)  # past its time-to-live: it counts as dead
    await f.client.config_resetstat()
    back = await f.reclaim_expired()
    stats = await f.client.info("commandstats")
    if back != len(held.entries):
        raise RuntimeError(f"the reclaim returned {back} of {len(held.entries)} leases")
    again = await f.lease(
        "n2", DEAD_LEASES, [site], lease_ms=600_000, per_site=DEAD_LEASES, offer_size=8
    )
    await f.commit("n2", acks=[e.rid for e in again.entries])
    usec = sum(int(v["usec"]) for name, v in stats.items() if name.startswith("cmdstat_eval"))
    return usec / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--urls", type=int, default=100_000)
    parser.add_argument("--runtime-meta", action="store_true")
    parser.add_argument(
        "--item-keys", type=int, default=0, help="keys of stored items kept in each state"
    )
    parser.add_argument("--redis-server", default=None, help="redis-server binary")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisProcess(Path(tmp), persist=False, server=args.redis_server)
        server.start()
        try:
            figures = asyncio.run(
                measure_tracked(
                    server.url,
                    args.urls,
                    runtime_meta=args.runtime_meta,
                    item_keys=args.item_keys,
                )
            )
        finally:
            server.stop()
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
