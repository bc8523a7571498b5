"""Cluster-wide rate limits: parsing, the lease script's pacing, and four real nodes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from crawlfleet.exceptions import ConfigError
from crawlfleet.frontier.client import Frontier, Outgoing
from crawlfleet.frontier.limits import SPACING, RateLimits, parse_limit
from crawlfleet.node.launcher import start_node, wait_all
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import TestSite

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("spec", "interval"),
    [("2/1s", 500), ("30/1m", 2000), ("1/5", 5000), ("10/500ms", 50), ("none", 0), ("", 0)],
)
def test_limits_parse_to_spaced_intervals(spec: str, interval: int) -> None:
    assert parse_limit(spec) == round(interval * SPACING)


@pytest.mark.parametrize("spec", ["fast", "2/0s", "0/1s", "2 per second", "-1/1s"])
def test_bad_limits_say_what_is_wrong(spec: str) -> None:
    with pytest.raises(ConfigError, match="CRAWLFLEET_RATE_LIMITS"):
        RateLimits.parse({"*": spec}, source="CRAWLFLEET_RATE_LIMITS")


def test_the_most_specific_pattern_applies() -> None:
    limits = RateLimits.parse(
        {"*": "10/1s", "*.example.com": "2/1s", "shop.example.com": "1/1s"}, source="t"
    )
    assert limits.interval_ms("shop.example.com") == parse_limit("1/1s")
    assert limits.interval_ms("www.example.com") == parse_limit("2/1s")
    assert limits.interval_ms("example.com") == parse_limit("2/1s")
    assert limits.interval_ms("other.org") == parse_limit("10/1s")
    assert RateLimits({}).interval_ms("any.site") == 0
    with pytest.raises(ConfigError, match="must be a host"):
        RateLimits.parse({"http://x/": "1/1s"}, source="t")


def test_lease_paces_limited_sites_on_the_redis_clock(
    redis_server_url: str, key_prefix: str
) -> None:
    def out(url: str, site: str) -> Outgoing:
        return Outgoing(hashlib.sha1(url.encode()).digest()[:16], site, 0, url.encode())

    async def body() -> None:
        client = make_client(redis_server_url)
        f = Frontier(client, JobKeys.of(key_prefix, "paced"))
        try:
            await f.commit(
                "n1",
                [out(f"s{i}", "slow") for i in range(5)] + [out(f"f{i}", "fast") for i in range(5)],
            )
            kw: dict[str, Any] = {"lease_ms": 60000, "per_site": 5, "offer_size": 10}
            r = await f.lease("n1", 10, ["slow", "fast"], intervals=[300, 0], **kw)
            sites = [e.site for e in r.entries]
            assert sites.count("slow") == 1 and sites.count("fast") == 5
            r = await f.lease("n2", 10, ["slow"], intervals=[300], **kw)
            assert r.entries == [] and 0 < r.ready_in_ms <= 300
            await asyncio.sleep(r.ready_in_ms / 1000 + 0.02)
            r = await f.lease("n2", 10, ["slow"], intervals=[300], **kw)
            assert len(r.entries) == 1
            # no budget is spent when there is nothing to fetch
            pace_before = await client.hget(f.keys.pace, "empty")
            r = await f.lease("n2", 10, ["empty"], intervals=[300], **kw)
            assert r.entries == [] and await client.hget(f.keys.pace, "empty") == pace_before
        finally:
            await client.aclose()

    asyncio.run(body())


def limited_nodes(
    n: int,
    job: str,
    limit: str,
    site: TestSite,
    redis_url: str,
    env: dict[str, str],
    tmp_path: Path,
) -> list[subprocess.Popen[bytes]]:
    """*n* test-site nodes on *job*, every site limited to *limit*."""
    settings = {
        **env,
        "CRAWLFLEET_RATE_LIMITS": json.dumps({"*": limit}),
        "CRAWLFLEET_HEARTBEAT_SECONDS": 0.5,
        "CRAWLFLEET_FINISH_GRACE_SECONDS": 1,
        "LOG_LEVEL": "INFO",
    }
    return [
        start_node(
            "crawlfleet.testsite.spider:TestSiteSpider",
            job=job,
            redis_url=redis_url,
            log=tmp_path / f"node{i}.log",
            spider_args={"start_urls": ",".join(site.seed_urls)},
            settings=settings,
            cwd=ROOT,
        )
        for i in range(n)
    ]


@pytest.mark.slow
def test_four_nodes_keep_a_site_under_its_limit(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    with TestSite(SiteModel(pages=36, hosts=3, problems=False)) as site:
        started = time.monotonic()
        procs = limited_nodes(4, "polite", "2/1s", site, redis_server_url, node_env, tmp_path)
        codes = wait_all(procs, 120)
        assert codes == [0, 0, 0, 0], (tmp_path / "node0.log").read_text()[-3000:]
        stats = site.stats()
    assert stats["never_fetched"] == [] and stats["fetched_twice"] == []
    elapsed = time.monotonic() - started
    for host, figures in stats["hosts"].items():
        assert figures["max_rate_1s"] <= 2, f"{host}: {figures}"
    # 2 requests/s per host at most: the crawl cannot be faster than that
    per_host = max(f["requests"] for f in stats["hosts"].values())
    assert elapsed >= per_host / 2 * 0.9


@pytest.mark.slow
def test_a_limit_changed_at_run_time_takes_effect_within_seconds(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    with TestSite(SiteModel(pages=40, hosts=1, problems=False)) as site:
        started = time.monotonic()
        procs = limited_nodes(2, "retuned", "1/1s", site, redis_server_url, node_env, tmp_path)
        time.sleep(4)
        slow_phase = site.stats()["total_requests"]
        assert slow_phase <= 5  # about one a second so far
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "crawlfleet.cli.main",
                "limits",
                "set",
                "retuned",
                "*",
                "20/1s",
                "--redis-url",
                redis_server_url,
                "-s",
                f"CRAWLFLEET_KEY_PREFIX={node_env['CRAWLFLEET_KEY_PREFIX']}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert r.returncode == 0, r.stderr
        codes = wait_all(procs, 60)
        elapsed = time.monotonic() - started
        stats = site.stats()
    assert codes == [0, 0]
    assert stats["never_fetched"] == []
    # at 1/s the 40+ pages would take over 40 s; at 20/s they take a few seconds more
    assert elapsed < 25, elapsed
    logs = "".join((tmp_path / f"node{i}.log").read_text() for i in range(2))
    assert "Rate limits of job 'retuned' now: {'*': '20/1s'}" in logs
