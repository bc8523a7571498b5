"""Seen-filter memory per URL and the Bloom filter's measured false-positive rate."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import asdict, dataclass
from typing import Any

from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.records import SeenConfig
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys

__all__ = ["SeenResult", "bloom_figures", "measure_seen"]

BATCH = 5000


@dataclass
class SeenResult:
    mode: str
    error_rate: float | None
    urls: int
    bytes_per_url: float
    layers: int
    false_positive_rate: float | None
    insert_seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def _measure(
    url: str, prefix: str, mode: str, urls: int, error_rate: float, probes: int
) -> SeenResult:
    client = make_client(url)
    job = f"bench-seen-{mode}-{os.getpid()}-{time.time_ns()}"
    keys = JobKeys.of(prefix, job)
    frontier = Frontier(
        client, keys, SeenConfig(mode, bloom_capacity=urls, bloom_error_rate=error_rate)
    )
    try:
        started = time.perf_counter()
        for start in range(0, urls, BATCH):
            fps = [os.urandom(16) for _ in range(min(BATCH, urls - start))]
            await frontier.seen_check(fps, add=True)
        insert_seconds = time.perf_counter() - started
        layers = 0
        if mode == "exact":
            used = int(await client.memory_usage(keys.seen, samples=0) or 0)
            fp_rate = None
        else:
            layers, used, fp_rate = await bloom_figures(frontier, probes)
        return SeenResult(
            mode,
            None if mode == "exact" else error_rate,
            urls,
            used / urls,
            layers,
            fp_rate,
            insert_seconds,
        )
    finally:
        await frontier.reset()
        await client.aclose()


async def bloom_figures(frontier: Frontier, probes: int) -> tuple[int, int, float]:
    """(layers, bytes, false-positive rate over *probes* random fingerprints) of a
    Bloom-mode frontier's seen-filter."""
    client, keys = frontier.client, frontier.keys
    layers = int(await client.hget(keys.bloom, "layers") or 0)
    used = int(await client.memory_usage(keys.bloom, samples=0) or 0)
    for i in range(1, layers + 1):
        used += int(await client.memory_usage(keys.bloom_layer(i), samples=0) or 0)
    hits = 0
    for start in range(0, probes, BATCH):
        fps = [os.urandom(16) for _ in range(min(BATCH, probes - start))]
        hits += sum(await frontier.seen_check(fps, add=False))
    return layers, used, hits / probes


def measure_seen(
    url: str,
    prefix: str,
    mode: str,
    urls: int = 1_000_000,
    error_rate: float = 1e-3,
    probes: int = 1_000_000,
) -> SeenResult:
    """Insert *urls* random fingerprints, then measure memory (and, for Bloom, the
    false-positive rate over *probes* fingerprints never inserted)."""
    return asyncio.run(_measure(url, prefix, mode, urls, error_rate, probes))
