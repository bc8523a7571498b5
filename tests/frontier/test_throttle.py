"""Cluster-wide back-off and robots.txt Crawl-delay: the lease script's robots probe,
Retry-After parsing, and real nodes against a site that answers 429 when crawled too
fast, or asks for a Crawl-delay."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from crawlfleet.frontier.client import Frontier, Outgoing
from crawlfleet.frontier.throttle import retry_after_ms
from crawlfleet.node.launcher import wait_all
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import TestSite
from tests.frontier.test_limits import limited_nodes


def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert retry_after_ms(b"3") == 3000
    assert retry_after_ms("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10_000
    assert retry_after_ms(b"soon") == retry_after_ms(None) == retry_after_ms(b"-5") == 0
    assert retry_after_ms(b"999999") == 3600 * 1000


def test_a_site_whose_robots_txt_is_unknown_gives_one_request_per_probe(
    redis_server_url: str, key_prefix: str
) -> None:
    async def body() -> None:
        client = make_client(redis_server_url)
        f = Frontier(client, JobKeys.of(key_prefix, "probe"))
        kw: dict[str, Any] = {"lease_ms": 60000, "per_site": 9, "offer_size": 10}
        try:
            await f.commit(
                "n1",
                [Outgoing(hashlib.sha1(f"u{i}".encode()).digest(), "u", 0, b"x") for i in range(9)],
            )
            r = await f.lease("n1", 9, ["u"], robots_probe_ms=5000, **kw)
            assert len(r.entries) == 1  # the node that gets it reads robots.txt
            r = await f.lease("n2", 9, ["u"], robots_probe_ms=5000, **kw)
            assert r.entries == [] and 4000 < r.ready_in_ms <= 5000
            await f.set_robots({"u": 0})  # read: no Crawl-delay
            r = await f.lease("n2", 9, ["u"], robots_probe_ms=5000, **kw)
            assert len(r.entries) == 8
        finally:
            await client.aclose()

    asyncio.run(body())


def crawl(
    site: TestSite,
    job: str,
    redis_url: str,
    node_env: dict[str, str],
    tmp_path: Path,
    **settings: Any,
) -> float:
    """Two unlimited nodes of 8 requests each crawl *site*; returns the seconds taken."""
    started = time.monotonic()
    tmp_path.mkdir(parents=True, exist_ok=True)
    extra = {"CONCURRENT_REQUESTS": 8, **settings}
    procs = limited_nodes(2, job, "none", site, redis_url, node_env, tmp_path, [extra, extra])
    codes = wait_all(procs, 120)
    assert codes == [0, 0], (tmp_path / "node0.log").read_text()[-3000:]
    return time.monotonic() - started


@pytest.mark.slow
def test_429_answers_back_the_site_off_for_every_node(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    model = SiteModel(pages=60, hosts=2, problems=False)
    retries = {"RETRY_TIMES": 50, "CRAWLFLEET_FEEDBACK": False}
    backoff = {
        "CRAWLFLEET_BACKOFF_START_SECONDS": 0.4,
        "CRAWLFLEET_BACKOFF_HALF_LIFE_SECONDS": 5,
        **retries,
    }
    with TestSite(model, ban_above_rate=4) as site:
        crawl(
            site,
            "banned-off",
            redis_server_url,
            node_env,
            tmp_path / "off",
            **retries,
            CRAWLFLEET_BACKOFF_STATUSES="[]",
            CRAWLFLEET_BACKOFF_LATENCY_FACTOR=0,
        )
        without = sum(site.stats()["banned"].values())
        site.reset()
        crawl(site, "banned-on", redis_server_url, node_env, tmp_path / "on", **backoff)
        stats = site.stats()
    with_backoff = sum(stats["banned"].values())
    assert stats["never_fetched"] == []
    logs = "".join(p.read_text() for p in (tmp_path / "on").glob("node*.log"))
    assert "Backing off 127.0.0." in logs and "(it answered 429)" in logs
    # hammering a defending site without back-off draws many more 429s than with it
    assert with_backoff * 3 < without, (with_backoff, without)


@pytest.mark.slow
def test_robots_crawl_delay_holds_across_the_cluster(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    with TestSite(SiteModel(pages=24, hosts=2, problems=False), robots_crawl_delay=0.5) as site:
        crawl(site, "robots", redis_server_url, node_env, tmp_path, ROBOTSTXT_OBEY=True)
        stats = site.stats()
    assert stats["never_fetched"] == [] and stats["fetched_twice"] == []
    # Crawl-delay 0.5 s: at most 2 requests in any 1 s window, from the very first one
    for host, figures in stats["hosts"].items():
        assert figures["max_rate_1s"] <= 2, f"{host}: {figures}"
    logs = (tmp_path / "node0.log").read_text() + (tmp_path / "node1.log").read_text()
    assert "asks for a Crawl-delay of 0.5s" in logs
    assert json.dumps(stats["robots_requests"])  # every node read robots.txt itself
