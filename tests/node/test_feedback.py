"""The feedback controller (AIMD on a node's own figures), and real nodes of unequal
speed sharing one crawl."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request
from scrapy.utils.test import get_crawler

from crawlfleet.node.feedback import CALM_INTERVALS, Controller, Feedback, Limits, Sample
from crawlfleet.node.launcher import start_node, wait_all
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import CLIENT_HEADER, TestSite
from tests.support.node_parts import Engine, node
from tests.support.nodes import site_node

#: rates, send times and deadlines: ./dev.sh test runs these alone
pytestmark = pytest.mark.timing

CALM = Sample(
    latency=0.1,
    outcomes=50,
    errors=0,
    cpu_percent=40,
    loop_lag_ms=5,
    rss_mb=100,
    utilisation=1.0,
)


def calm(**changes: Any) -> Sample:
    return dataclasses.replace(CALM, **changes)


def test_overload_cuts_the_limit_and_calm_grows_it_back_slowly() -> None:
    c = Controller(16)
    assert c.step(CALM, 16) == 16
    assert c.step(calm(loop_lag_ms=400), 16) == 12
    assert "event loop lagged 400 ms" in c.reason
    assert c.step(calm(loop_lag_ms=400), 16) == 9
    # hysteresis: no growth before CALM_INTERVALS calm intervals in a row
    for _ in range(CALM_INTERVALS - 1):
        assert c.step(CALM, 16) == 9
    assert c.step(CALM, 16) == 10
    # one overload in between starts the count again
    assert c.step(calm(loop_lag_ms=400), 16) == 7
    for _ in range(CALM_INTERVALS):
        c.step(CALM, 16)
    assert c.limit == 8


def test_the_limit_stays_between_the_minimum_and_the_ceiling() -> None:
    c = Controller(4, Limits(minimum=2))
    for _ in range(10):
        c.step(calm(loop_lag_ms=1000), 4)
    assert c.limit == 2
    for _ in range(10 * CALM_INTERVALS):
        c.step(CALM, 4)
    assert c.limit == 4
    assert c.step(CALM, 3) == 3  # the operator lowered the ceiling


def test_an_idle_node_does_not_grow() -> None:
    c = Controller(8)
    c.step(calm(loop_lag_ms=1000), 8)
    for _ in range(5 * CALM_INTERVALS):
        c.step(calm(utilisation=0.3), 8)
    assert c.limit == 6


def test_latency_counts_only_when_it_rises_above_its_baseline() -> None:
    slow_all_along = Controller(8)
    for _ in range(10):
        slow_all_along.step(calm(latency=0.9), 8)
    assert slow_all_along.limit == 8
    rising = Controller(8)
    for _ in range(5):
        rising.step(calm(latency=0.1), 8)
    assert rising.step(calm(latency=0.35), 8) == 6
    assert "latency 350 ms, baseline 100 ms" in rising.reason
    # tiny latencies: tripled but only by a few ms is noise, not overload
    fast = Controller(8)
    fast.step(calm(latency=0.002), 8)
    assert fast.step(calm(latency=0.02), 8) == 8


def test_errors_bans_cpu_and_memory() -> None:
    c = Controller(8, Limits(max_rss_mb=500))
    assert c.step(calm(errors=20, outcomes=50), 8) == 6
    assert "20 of 50 outcomes" in c.reason
    assert c.step(calm(errors=3, outcomes=4), 8) == 6  # too few outcomes to judge
    assert c.step(calm(cpu_percent=100), 8) == 6  # busy CPU, prompt loop: fine
    assert c.step(calm(cpu_percent=100, loop_lag_ms=60), 8) == 4
    assert c.step(calm(rss_mb=900), 8) == 3
    assert "memory 900 MB" in c.reason


def test_the_limit_holds_while_the_node_waits_for_its_item_store() -> None:
    """Pages stuck waiting for a store that is down keep a node "busy": those intervals
    say nothing of its capacity, so the limit neither grows nor shrinks."""
    crawler = get_crawler(settings_dict={"CRAWLFLEET_FEEDBACK_INTERVAL_SECONDS": 1})
    ext = Feedback.from_crawler(crawler)
    scheduler = node({}, Engine())
    ext.scheduler, ext.controller = scheduler, Controller(scheduler.steering.ceiling)
    ext.controller.limit = 4  # below its ceiling (16): calm and busy intervals grow it
    for request in (Request(f"http://a.test/{i}") for i in range(16)):
        scheduler.ledger.handed[request] = "rid"  # every slot busy with a page

    def intervals(n: int) -> int:
        for _ in range(n):
            for _ in range(4):
                ext._lag(0.001)
            ext.tick()
        assert ext.controller is not None
        return ext.controller.limit

    scheduler.sync.backlog.waiting_for_store = True
    assert intervals(3 * CALM_INTERVALS) == 4
    scheduler.sync.backlog.waiting_for_store = False
    assert intervals(CALM_INTERVALS) == 5


# -- real nodes ----------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]


def labelled_node(
    label: str,
    site: TestSite,
    redis_url: str,
    node_env: dict[str, str],
    tmp_path: Path,
    job: str,
    **extra: Any,
) -> subprocess.Popen[bytes]:
    """A test-site node whose requests the site counts under *label*."""
    settings = {
        **node_env,
        "CONCURRENT_REQUESTS": 4,
        "CRAWLFLEET_HEARTBEAT_SECONDS": 0.5,
        "CRAWLFLEET_FINISH_GRACE_SECONDS": 1,
        "LOG_LEVEL": "INFO",
        "DEFAULT_REQUEST_HEADERS": json.dumps({CLIENT_HEADER: label}),
        **extra,
    }
    return site_node(
        site, job=job, redis_url=redis_url, log=tmp_path / f"node-{label}.log", settings=settings
    )


def slow(seconds: float) -> dict[str, Any]:
    return {
        "DOWNLOADER_MIDDLEWARES": json.dumps({"crawlfleet.testsite.slowdown.ExtraLatency": 50}),
        "TESTSITE_EXTRA_LATENCY_SECONDS": seconds,
    }


def node_logs(tmp_path: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(tmp_path.glob("node-*.log")))


@pytest.mark.slow
def test_a_three_times_slower_node_takes_a_smaller_share_and_no_backlog(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    with TestSite(SiteModel(pages=300, hosts=2, problems=False), latency_seconds=0.1) as site:
        procs = [
            labelled_node("fast", site, redis_server_url, node_env, tmp_path, "uneven"),
            labelled_node(
                "slow", site, redis_server_url, node_env, tmp_path, "uneven", **slow(0.2)
            ),
        ]
        assert wait_all(procs, 120) == [0, 0], node_logs(tmp_path)[-3000:]
        stats = site.stats()
    assert stats["never_fetched"] == [] and stats["fetched_twice"] == []
    fast, slow_ = stats["clients"]["fast"], stats["clients"]["slow"]
    share = slow_["requests"] / (fast["requests"] + slow_["requests"])
    # capacity 1 : 3, so about a quarter; the slow node must not take an equal share
    assert 0.1 <= share <= 0.4, (share, fast, slow_)
    # no backlog: the slow node holds at most what it can start at once, so its last
    # request leaves about when the fast node's does
    assert slow_["last"] - fast["last"] < 1.0, (fast, slow_)


@pytest.mark.slow
def test_a_node_that_joins_halfway_starts_pulling_at_once(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    with TestSite(SiteModel(pages=300, hosts=2, problems=False), latency_seconds=0.1) as site:
        first = labelled_node("first", site, redis_server_url, node_env, tmp_path, "joined")
        deadline = time.monotonic() + 60
        while site.stats()["content_fetched"] < 100:
            assert time.monotonic() < deadline, node_logs(tmp_path)[-3000:]
            time.sleep(0.05)
        joined_at = time.monotonic()
        late = labelled_node("late", site, redis_server_url, node_env, tmp_path, "joined")
        assert wait_all([first, late], 120) == [0, 0], node_logs(tmp_path)[-3000:]
        stats = site.stats()
    assert stats["never_fetched"] == [] and stats["fetched_twice"] == []
    late_figures = stats["clients"]["late"]
    assert late_figures["requests"] >= 30, stats["clients"]
    # process start-up included; the benchmark reports this delay
    assert late_figures["first"] - joined_at < 15, late_figures


@pytest.mark.slow
def test_an_overloaded_node_lowers_its_concurrency_and_says_why(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    with TestSite(SiteModel(pages=60, hosts=2, problems=False), latency_seconds=0.05) as site:
        proc = start_node(
            "tests.support.node_spiders:BlockingSpider",
            job="overloaded",
            redis_url=redis_server_url,
            log=tmp_path / "node.log",
            spider_args={"start_urls": ",".join(site.seed_urls), "block": "0.12"},
            settings={
                **node_env,
                "CONCURRENT_REQUESTS": 8,
                "CRAWLFLEET_FEEDBACK_LOOP_LAG_MS": 60,
                "CRAWLFLEET_FEEDBACK_INTERVAL_SECONDS": 0.5,
                "CRAWLFLEET_STATS_FILE": str(tmp_path / "stats.json"),
                "LOG_LEVEL": "INFO",
            },
            cwd=ROOT,
        )
        assert wait_all([proc], 120) == [0], (tmp_path / "node.log").read_text()[-3000:]
        assert site.stats()["never_fetched"] == []
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats.get("crawlfleet/feedback/down", 0) >= 1, stats
    log = (tmp_path / "node.log").read_text()
    assert "Feedback: concurrency 8 -> 6 (event loop lagged" in log
