"""crawlfleet on a Redis Cluster: a local one of three masters with a replica each.
A job's keys share one slot, the fleet's politeness keys another; a lease paces in the
one and takes requests in the other, and gives back the slots it could not fill."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from crawlfleet.benchmark.cluster import run_cluster
from crawlfleet.fleet.limits import set_limits
from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.records import Outgoing, Revisit, SeenConfig
from crawlfleet.frontier.sharded import shard_of
from crawlfleet.node.launcher import start_node, wait_all
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys, seed_keys
from crawlfleet.redis.localcluster import LocalCluster, RedisProcess, local_cluster
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import TestSite

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("cluster")) as started:
        yield started


def out(url: str, site: str) -> Outgoing:
    return Outgoing(url.encode().ljust(16, b"-")[:16], site, 0, url.encode())


@pytest.mark.timing
def test_a_lease_paces_apart_from_the_job_and_gives_back_unused_slots(
    cluster: LocalCluster, key_prefix: str
) -> None:
    async def body() -> None:
        client = make_client(cluster.url)
        assert type(client).__name__ == "RedisCluster"
        a = Frontier(client, JobKeys.of(key_prefix, "job-a"), SeenConfig("bloom"))
        b = Frontier(client, JobKeys.of(key_prefix, "job-b"), SeenConfig("exact"))
        try:
            await a.commit("n1", [out("a1", "s"), out("a2", "s")])
            await b.commit("n2", [out("b1", "s")])
            kw: dict[str, Any] = {"lease_ms": 60000, "per_site": 10, "offer_size": 10}
            paced: dict[str, Any] = {"intervals": [100_000], "horizon_us": 1_000_000}
            r = await a.lease("n1", 10, ["s"], **paced, **kw)
            assert [e.slot_us for e in r.entries] == [0, 100_000]
            # 10 slots were reserved, 2 used: the schedule goes on from the second,
            # 200 ms after the first lease (slots are told relative to each call's now)
            later = await b.lease("n2", 10, ["s"], **paced, **kw)
            due = max(0, r.now_us + 200_000 - later.now_us)
            assert [e.slot_us for e in later.entries] == [due]
            await set_limits(client, key_prefix, None, {"*.shop.com": "5/1s"})
            st = await a.heartbeat("n1", ttl_ms=5000, status="{}", busy=False, lease_ms=1000)
            assert st.fleet_limits == {"*.shop.com": "5/1s"} and st.leased == 2
            assert await a.reset() > 0
        finally:
            await client.aclose()

    asyncio.run(body())


def test_a_paced_lease_on_a_cluster_takes_revisits_at_their_share(
    cluster: LocalCluster, key_prefix: str
) -> None:
    async def body() -> None:
        client = make_client(cluster.url)
        f = Frontier(client, JobKeys.of(key_prefix, "job-share"), revisit_share=0.25)
        try:
            kw: dict[str, Any] = {"lease_ms": 60000, "offer_size": 10}
            await f.commit("n1", [out(f"rv{i}", "s") for i in range(8)])
            first = (await f.lease("n1", 8, ["s"], per_site=8, **kw)).entries
            kept = [Revisit(e.rid, 1, e.payload, new=True) for e in first]
            assert (await f.commit("n1", revisits=kept)).revisited == 8
            await asyncio.sleep(0.05)
            await f.reclaim_expired()
            await f.commit("n1", [out(f"new{i}", "s") for i in range(8)])
            got = []
            for _ in range(4):
                got += (await f.lease("n1", 2, ["s"], per_site=2, **kw)).entries
            # one revisit in four, through pace.lua and lease_paced.lua
            assert [e.payload[:2] for e in got].count(b"rv") == 2
            assert (await f.counters())["revisits_queued"] == 6
            assert await f.reset() > 0
            assert not await client.exists(f.keys.revisits("s"))
        finally:
            await client.aclose()

    asyncio.run(body())


@pytest.mark.parametrize("tagged", [False, True])
def test_a_seed_key_is_read_on_a_cluster(
    cluster: LocalCluster, key_prefix: str, tagged: bool
) -> None:
    """A scrapy-redis start-URL key (with a hash tag of its own or none) is read, taken
    and its unreadable entries set aside in its own slot, wherever the job's keys are."""

    async def body() -> None:
        client = make_client(cluster.url)
        seed = f"{{{key_prefix}}}:start_urls" if tagged else f"{key_prefix}:start_urls"
        keys = seed_keys(seed)
        frontier = Frontier(client, JobKeys.of(key_prefix, "job"))
        try:
            await client.sadd(seed, b"http://a.test/1", b"bad")
            batch = await frontier.read_seeds(seed, 10, "n1", 5000)
            assert (batch.kind, sorted(batch.entries)) == ("set", [b"bad", b"http://a.test/1"])
            assert (await frontier.read_seeds(seed, 10, "n2", 5000)).kind == "busy"
            assert await frontier.done_seeds(seed, "n1", batch, [b"bad"]) == 2
            assert await client.lrange(keys.unreadable, 0, -1) == [b"bad"]
            assert await frontier.join_alone("n1", 5000) == []
            assert await frontier.join_alone("n2", 5000) == ["n1"]
        finally:
            for key in (seed, keys.reader, keys.unreadable):
                await client.delete(key)
            await frontier.reset()
            await client.aclose()

    asyncio.run(body())


@pytest.mark.slow
@pytest.mark.parametrize("shards", [1, 6])
def test_a_crawl_on_a_cluster_is_exact_and_polite_through_fail_overs(
    cluster: LocalCluster, node_env: dict[str, str], tmp_path: Path, shards: int
) -> None:
    """Two nodes crawl under a 10/s limit per site, the job in one slot or in six
    shards; every master that holds a shard of the job or the politeness slot is failed
    over mid-crawl: no page is lost or fetched twice, and no site sees more than its
    limit in any second."""
    job = f"clustered{shards}"
    keys = JobKeys.of(node_env["CRAWLFLEET_KEY_PREFIX"], job)
    tags = [keys.in_shard(k, shards).tag for k in range(shards)] + ["{polite}"]
    settings = {
        **node_env,
        "CRAWLFLEET_SHARDS": shards,
        "CRAWLFLEET_RATE_LIMITS": json.dumps({"*": "10/1s"}),
        "CRAWLFLEET_RATE_LIMIT_MARGIN": 0.1,
        "CRAWLFLEET_HEARTBEAT_SECONDS": 0.5,
        "CRAWLFLEET_FINISH_GRACE_SECONDS": 1,
        "LOG_LEVEL": "INFO",
    }
    with TestSite(SiteModel(pages=120, hosts=3, problems=False)) as site:
        procs = [
            start_node(
                "crawlfleet.testsite.spider:TestSiteSpider",
                job=job,
                redis_url=cluster.url,
                log=tmp_path / f"node{i}.log",
                spider_args={"start_urls": ",".join(site.seed_urls)},
                settings=settings,
                cwd=ROOT,
            )
            for i in range(2)
        ]
        deadline = time.monotonic() + 60
        while site.stats()["total_requests"] < 30 and time.monotonic() < deadline:
            time.sleep(0.1)
        masters = {cluster.master_of(tag): tag for tag in tags}  # each master once
        moved = [cluster.fail_over(tag) for tag in masters.values()]
        after_fail_overs = site.stats()["total_requests"]
        codes = wait_all(procs, 180)
        stats = site.stats()
    logs = "".join((tmp_path / f"node{i}.log").read_text() for i in range(2))
    assert codes == [0, 0], logs[-4000:]
    assert all(old != new for old, new in moved)
    assert after_fail_overs < stats["total_requests"]  # the crawl went on after them
    assert stats["never_fetched"] == [] and stats["fetched_twice"] == []
    for host, figures in stats["hosts"].items():
        assert figures["max_rate_1s"] <= 10, (host, figures)
    prefix = node_env["CRAWLFLEET_KEY_PREFIX"]
    acked = [
        int(cluster.client(cluster.master_of(tag)).hget(f"{prefix}:{tag}:counters", "acked") or 0)
        for tag in tags[:-1]
    ]
    # each shard crawled its hosts' pages, and only those
    hosts = {urlsplit(u).hostname or "" for u in site.seed_urls}
    held = {shard_of(host, shards) for host in hosts}
    assert {k for k, n in enumerate(acked) if n} == held, (acked, hosts)


def test_a_cluster_that_serves_no_slot_is_one_line(tmp_path: Path) -> None:
    node = RedisProcess(tmp_path / "empty", ("--cluster-enabled", "yes"))
    node.start()
    try:
        seed = ["seed", "shop", "https://a.example/", "--redis-url", node.url]
        r = subprocess.run(
            [sys.executable, "-m", "crawlfleet.cli.main", *seed],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
    finally:
        node.close()
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "slots are not covered" in lines[0], r.stderr


def test_the_cluster_benchmark_measures_one_shard_and_several() -> None:
    """`crawlfleet bench --only cluster`, small: both runs lease and acknowledge what they
    asked for, each master's share is measured, and a sharded job spreads over them."""
    one, sharded = run_cluster(shards=3, queued=3000, sites=60, leases=1500)
    for r in (one, sharded):
        assert (r.queued, r.leased, r.masters) == (3000, 1500, 3)
        assert abs(sum(r.master_shares) - 1) < 1e-6 and r.capacity_per_second > 0
        assert r.redis_us_per_queued > 0 and r.redis_us_per_leased > 0
    assert (one.shards, sharded.shards) == (1, 3)
    assert max(one.master_shares) > 0.8  # one job, one master
    assert min(sharded.master_shares) > 0.1  # every master does some of it


@pytest.mark.parametrize(
    ("option", "value"), [("--cluster-shards", "1"), ("--cluster-queued", "0")]
)
def test_bad_cluster_benchmark_options_are_one_line(option: str, value: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "crawlfleet.cli.main", "bench", "--only", "cluster", option, value],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and option in lines[0], lines
