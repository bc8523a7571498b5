"""The scale scenario of ``crawlfleet bench --only scale``: memory and speed of one
Redis holding a large crawl.

It starts a Redis of its own (127.0.0.1, nothing written to disk), so that the figures
are this crawl's alone and the operator's Redis is not filled with gigabytes, then:

- **seen-filter**: adds *urls* random fingerprints to a Bloom filter sized for them at
  *error_rate* (as ``CRAWLFLEET_BLOOM_CAPACITY`` and ``_ERROR_RATE`` would size it), in
  batches of BATCH, as commits do; bytes per URL are ``MEMORY USAGE`` of its keys over
  *urls*, and the false-positive rate is measured on PROBES fingerprints never added;
- **queue**: queues *queued* requests over *sites* sites through the commit script, in
  batches of ``CRAWLFLEET_FLUSH_BATCH`` (500), each encoded by the nodes' own request
  codec from a URL of about URL_CHARS characters; bytes per request are Redis's
  ``used_memory`` growth over *queued* (the seen-filter is left out: measured above);
- **lease and ack**: leases *lease_sample* of them as nodes do (offers of
  ``CRAWLFLEET_LEASE_SITES`` sites, LEASE_WANT a call), then acknowledges them in
  batches of 500.

Rates are measured from one client process running CLIENTS calls at a time: on a small
machine that process competes with Redis for the CPU, so they are a floor. Redis's own
cost of each operation (CPU µs of its main thread per URL added, per request queued,
leased, acked: from ``INFO cpu``, network and script calls included) does not depend on
the client: it is what a capacity plan is built from (docs/scaling.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import scrapy

from crawlfleet.benchmark.seenfilter import BATCH, bloom_figures
from crawlfleet.exceptions import CommandFailed
from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.records import Outgoing, SeenConfig
from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.redis.localcluster import RedisProcess

__all__ = ["ScaleResult", "run_scale"]

#: Requests per commit (CRAWLFLEET_FLUSH_BATCH); fingerprints per seen-filter call are
#: the seen part's BATCH.
COMMIT_BATCH = 500
#: Fingerprints never added, probed for the false-positive rate.
PROBES = 1_000_000
#: Requests a lease asks for, and sites offered to it (CRAWLFLEET_LEASE_SITES).
LEASE_WANT = 100
LEASE_SITES = 32
#: Calls in flight at once (the client's share of the work overlaps Redis's).
CLIENTS = 4
#: About this many characters per URL (the web's median is in the 60s-70s).
URL_CHARS = 66


@dataclass
class ScaleResult:
    redis_version: str
    bloom_urls: int
    bloom_error_rate: float
    bloom_bytes_per_url: float
    bloom_layers: int
    bloom_false_positive_rate: float
    bloom_adds_per_second: float
    queued: int
    sites: int
    url_chars: float  #: average URL length of the queued requests
    payload_bytes: float  #: average encoded request
    queued_bytes_per_request: float
    enqueued_per_second: float
    leased: int
    leased_per_second: float
    acked_per_second: float
    used_memory_peak_bytes: int
    #: Redis CPU µs per URL added, per request queued, leased and acknowledged
    redis_us_per_url_added: float = 0.0
    redis_us_per_queued: float = 0.0
    redis_us_per_leased: float = 0.0
    redis_us_per_acked: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@contextlib.contextmanager
def private_redis(server: str | None = None) -> Iterator[str]:
    """A Redis of this run's own on 127.0.0.1 that writes nothing to disk (the binary
    *server*, by default the embedded Redis's); its URL."""
    with tempfile.TemporaryDirectory(prefix="crawlfleet-scale-") as workdir:
        process = RedisProcess(Path(workdir), persist=False, server=server)
        try:
            try:
                process.start()
            except RuntimeError as exc:
                raise CommandFailed(f"the scale run's Redis did not start: {exc}") from None
            yield process.url
        finally:
            process.stop()


def cpu_us(info: dict[str, Any]) -> float:
    """CPU µs Redis's main thread has used so far, from its ``INFO cpu`` (the whole
    process on a Redis older than 6.2). Not ``INFO commandstats``: there a command a
    script calls counts once in its own line and again in the script's."""
    user = info.get("used_cpu_user_main_thread", info.get("used_cpu_user", 0.0))
    system = info.get("used_cpu_sys_main_thread", info.get("used_cpu_sys", 0.0))
    return (float(user) + float(system)) * 1_000_000


async def _redis_us(client: Any) -> float:
    """CPU µs Redis's main thread has used so far (see cpu_us)."""
    return cpu_us(await client.info("cpu"))


async def in_parallel(calls: int, one: Callable[[int], Awaitable[Any]]) -> float:
    """Run ``one(i)`` for i in range(calls), CLIENTS at a time; the seconds it took."""
    started = time.perf_counter()
    pending = iter(range(calls))

    async def worker() -> None:
        for i in pending:
            await one(i)

    await asyncio.gather(*(worker() for _ in range(CLIENTS)))
    return time.perf_counter() - started


def url_of(n: int, sites: int) -> tuple[str, str]:
    """(site, URL of about URL_CHARS characters) of the *n*-th request."""
    site = f"www.shop-{n % sites:06d}.example.com"
    return site, f"https://{site}/catalogue/item-{n:09d}?page=2"


@dataclass
class LeasedAndAcked:
    leased: int
    lease_seconds: float
    ack_seconds: float
    #: CPU µs spent leasing and acknowledging, per Redis server measured
    lease_us: list[float]
    ack_us: list[float]


async def lease_then_ack(
    frontier: Any, count: int, cpu: Callable[[], Awaitable[list[float]]]
) -> LeasedAndAcked:
    """Lease *count* queued requests as nodes do (offers of LEASE_SITES sites, LEASE_WANT
    a call), then acknowledge them in batches of COMMIT_BATCH, CLIENTS at a time; *cpu*
    reads the CPU µs used so far by each Redis server measured."""
    leased: list[str] = []
    offer = await frontier.offer(LEASE_SITES)
    before = await cpu()
    started = time.perf_counter()
    while len(leased) < count and offer:
        r = await frontier.lease(
            "bench",
            min(LEASE_WANT, count - len(leased)),
            offer,
            lease_ms=3_600_000,
            per_site=max(1, math.ceil(LEASE_WANT / len(offer))),
            offer_size=LEASE_SITES,
        )
        leased += [e.rid for e in r.entries]
        offer = r.offer
    lease_seconds = time.perf_counter() - started
    after = await cpu()
    lease_us = [a - b for a, b in zip(after, before, strict=True)]

    async def ack(i: int) -> None:
        await frontier.commit("bench", acks=leased[i * COMMIT_BATCH : (i + 1) * COMMIT_BATCH])

    ack_seconds = await in_parallel(math.ceil(len(leased) / COMMIT_BATCH), ack)
    ack_us = [a - b for a, b in zip(await cpu(), after, strict=True)]
    return LeasedAndAcked(len(leased), lease_seconds, ack_seconds, lease_us, ack_us)


async def _bloom(url: str, prefix: str, urls: int, error_rate: float) -> dict[str, Any]:
    client = make_client(url, socket_timeout=120)
    keys = JobKeys.of(prefix, "scale-bloom")
    frontier = Frontier(
        client, keys, SeenConfig("bloom", bloom_capacity=urls, bloom_error_rate=error_rate)
    )
    try:

        async def add(i: int) -> None:
            n = min(BATCH, urls - i * BATCH)
            await frontier.seen_check([os.urandom(16) for _ in range(n)], add=True)

        spent = await _redis_us(client)
        seconds = await in_parallel(math.ceil(urls / BATCH), add)
        spent = await _redis_us(client) - spent
        layers, used, fp_rate = await bloom_figures(frontier, PROBES)
        await frontier.reset()
        return {
            "bloom_bytes_per_url": used / urls,
            "bloom_layers": layers,
            "bloom_false_positive_rate": fp_rate,
            "bloom_adds_per_second": urls / seconds,
            "redis_us_per_url_added": spent / urls,
        }
    finally:
        await client.aclose()


async def _queue(url: str, prefix: str, queued: int, sites: int, sample: int) -> dict[str, Any]:
    client = make_client(url, socket_timeout=120)
    frontier = Frontier(client, JobKeys.of(prefix, "scale-queue"), SeenConfig("exact"))
    codec = RequestCodec(None)
    chars = payload = 0
    try:
        before = int((await client.info("memory"))["used_memory"])

        async def commit(i: int) -> None:
            nonlocal chars, payload
            batch = []
            for n in range(i * COMMIT_BATCH, min(queued, (i + 1) * COMMIT_BATCH)):
                site, link = url_of(n, sites)
                encoded = codec.encode(scrapy.Request(link))
                chars += len(link)
                payload += len(encoded)
                batch.append(Outgoing(b"", site, 0, encoded))  # no fingerprint: no seen-filter
            await frontier.commit("scale", batch)

        spent = await _redis_us(client)
        enqueue_seconds = await in_parallel(math.ceil(queued / COMMIT_BATCH), commit)
        queue_us = await _redis_us(client) - spent
        after = int((await client.info("memory"))["used_memory"])

        async def cpu() -> list[float]:
            return [await _redis_us(client)]

        done = await lease_then_ack(frontier, sample, cpu)
        leased, lease_seconds, ack_seconds = done.leased, done.lease_seconds, done.ack_seconds
        lease_us, ack_us = done.lease_us[0], done.ack_us[0]
        peak = int((await client.info("memory"))["used_memory_peak"])
        version = str((await client.info("server"))["redis_version"])
        await frontier.reset()
        return {
            "redis_version": version,
            "url_chars": chars / max(queued, 1),
            "payload_bytes": payload / max(queued, 1),
            "queued_bytes_per_request": (after - before) / max(queued, 1),
            "enqueued_per_second": queued / enqueue_seconds,
            "leased": leased,
            "leased_per_second": leased / lease_seconds if lease_seconds else 0.0,
            "acked_per_second": leased / ack_seconds if ack_seconds else 0.0,
            "used_memory_peak_bytes": peak,
            "redis_us_per_queued": queue_us / max(queued, 1),
            "redis_us_per_leased": lease_us / max(leased, 1),
            "redis_us_per_acked": ack_us / max(leased, 1),
        }
    finally:
        await client.aclose()


def run_scale(
    *,
    urls: int = 100_000_000,
    error_rate: float = 1e-3,
    queued: int = 10_000_000,
    sites: int = 10_000,
    lease_sample: int = 1_000_000,
    prefix: str = "cfscale",
    server: str | None = None,
) -> ScaleResult:
    """The scale scenario (see the module docstring), on a Redis of its own."""

    async def main(url: str) -> ScaleResult:
        bloom = await _bloom(url, prefix, urls, error_rate)
        queue = await _queue(url, prefix, queued, sites, min(lease_sample, queued))
        return ScaleResult(
            bloom_urls=urls,
            bloom_error_rate=error_rate,
            queued=queued,
            sites=sites,
            **bloom,
            **queue,
        )

    with private_redis(server) as url:
        return asyncio.run(main(url))
