"""The cluster scenario of ``crawlfleet bench --only cluster``: one job on a Redis Cluster
of the run's own (three masters, no replicas, nothing written to disk), first in one
shard, then in several, through the nodes' own frontier (crawlfleet.frontier.sharded).

Each run queues *queued* requests over *sites* sites (Bloom seen-filter at 1e-3, every
URL new), leases *leases* of them as nodes do and acknowledges them. What it reports,
per run:

- Redis CPU µs per request queued, leased and acknowledged, summed over the masters
  (main-thread CPU from ``INFO cpu`` of each): what sharding costs in all;
- each master's share of that CPU: with one shard, one master does all the job's work;
  with several, the work spreads;
- the job's capacity: requests per second the cluster serves before its busiest master
  is saturated (1 s of CPU over the busiest master's µs per request, for a request
  queued, leased and acknowledged once). This, not the client's rate, is what a
  cluster adds: the rates from the one client process (also reported) are bound by
  that process on a small machine.
"""

from __future__ import annotations

import asyncio
import math
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import scrapy

from crawlfleet.benchmark.scale import (
    COMMIT_BATCH,
    cpu_us,
    in_parallel,
    lease_then_ack,
    url_of,
)
from crawlfleet.exceptions import CommandFailed
from crawlfleet.frontier.records import Outgoing, SeenConfig
from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.redis.localcluster import LocalCluster

__all__ = ["ClusterResult", "run_cluster"]

#: Masters of the run's cluster.
MASTERS = 3


@dataclass
class ClusterResult:
    masters: int
    shards: int
    queued: int
    sites: int
    leased: int
    enqueued_per_second: float
    leased_per_second: float
    acked_per_second: float
    #: Redis CPU µs per request, all masters together
    redis_us_per_queued: float
    redis_us_per_leased: float
    redis_us_per_acked: float
    #: each master's share of the run's Redis CPU (sums to 1)
    master_shares: list[float]
    #: requests/s (queued, leased and acked once each) before the busiest master is full
    capacity_per_second: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _masters_us(cluster: LocalCluster) -> list[float]:
    """CPU µs each master's main thread has used so far."""
    return [cpu_us(cluster.client(i).info("cpu")) for i in range(cluster.masters)]


async def _one_run(
    cluster: LocalCluster, job: str, shards: int, queued: int, sites: int, leases: int
) -> ClusterResult:
    client = make_client(cluster.url, socket_timeout=120)
    seen = SeenConfig("bloom", bloom_capacity=queued, bloom_error_rate=1e-3)
    frontier = JobFrontier(client, JobKeys.of("cfcluster", job), seen, shards=shards)
    codec = RequestCodec(None)
    try:
        await frontier.register_job()

        async def commit(i: int) -> None:
            batch = []
            for n in range(i * COMMIT_BATCH, min(queued, (i + 1) * COMMIT_BATCH)):
                site, link = url_of(n, sites)
                batch.append(Outgoing(os.urandom(16), site, 0, codec.encode(scrapy.Request(link))))
            await frontier.commit("bench", batch)

        async def cpu() -> list[float]:
            return _masters_us(cluster)

        before = await cpu()
        enqueue_seconds = await in_parallel(math.ceil(queued / COMMIT_BATCH), commit)
        queue_us = [after - b for after, b in zip(await cpu(), before, strict=True)]
        done = await lease_then_ack(frontier, leases, cpu)
        await frontier.reset()
    finally:
        await client.aclose()
    n, lease_us, ack_us = max(done.leased, 1), done.lease_us, done.ack_us
    # one request's cost on each master: its queueing, its lease and its ack
    per_request = [
        q / queued + lu / n + a / n for q, lu, a in zip(queue_us, lease_us, ack_us, strict=True)
    ]
    total = [q + lu + a for q, lu, a in zip(queue_us, lease_us, ack_us, strict=True)]
    return ClusterResult(
        masters=cluster.masters,
        shards=shards,
        queued=queued,
        sites=sites,
        leased=done.leased,
        enqueued_per_second=queued / enqueue_seconds,
        leased_per_second=done.leased / done.lease_seconds if done.lease_seconds else 0.0,
        acked_per_second=done.leased / done.ack_seconds if done.ack_seconds else 0.0,
        redis_us_per_queued=sum(queue_us) / queued,
        redis_us_per_leased=sum(lease_us) / n,
        redis_us_per_acked=sum(ack_us) / n,
        master_shares=[t / (sum(total) or 1) for t in total],
        capacity_per_second=1_000_000 / max(max(per_request), 1e-9),
    )


def run_cluster(
    *,
    shards: int = 12,
    queued: int = 1_000_000,
    sites: int = 10_000,
    leases: int = 200_000,
    server: str | None = None,
) -> list[ClusterResult]:
    """The cluster scenario (see the module docstring): a run with one shard, then one
    with *shards*, each on a fresh job of the same cluster."""
    with tempfile.TemporaryDirectory(prefix="crawlfleet-cluster-") as workdir:
        cluster = LocalCluster(Path(workdir), MASTERS, 0, persist=False, server=server)
        try:
            try:
                cluster.start()
            except RuntimeError as exc:
                raise CommandFailed(
                    f"the cluster run's Redis Cluster did not start: {exc}"
                ) from None
            return [
                asyncio.run(_one_run(cluster, f"cluster{n}", n, queued, sites, min(leases, queued)))
                for n in (1, shards)
            ]
        finally:
            cluster.close()
