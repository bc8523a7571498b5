"""The Telemetry extension: its figures from stats and signals, and a real node's."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy import Request, Spider, signals
from scrapy.http import Response
from scrapy.utils.test import get_crawler

from crawlfleet.node.launcher import start_node, wait_all
from crawlfleet.node.telemetry import PREVIEW_CHARS, PREVIEW_FIELDS, Telemetry, Window, preview
from crawlfleet.parts import parts_of
from crawlfleet.redis.keys import JobKeys
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import TestSite

ROOT = Path(__file__).resolve().parents[2]
SPIDER = "crawlfleet.testsite.spider:TestSiteSpider"
TELEMETRY = "crawlfleet.node.telemetry.Telemetry"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_window_keeps_only_the_last_seconds() -> None:
    window = Window(10)
    assert window.summary(0.0) == (0, None, None)
    window.add(1.0, 100.2)
    window.add(3.0, 100.7)
    window.add(5.0, 105.0)
    assert window.summary(105.5) == (3, 3.0, 5.0)
    assert window.summary(111.5) == (1, 5.0, 5.0)  # the bucket of second 100 left
    assert window.summary(200.0) == (0, None, None)


def test_figures_from_stats_and_signals() -> None:
    crawler = get_crawler(Spider, {"CONCURRENT_REQUESTS": 7})
    ext = Telemetry.from_crawler(crawler)
    assert ext.status in parts_of(crawler).status_providers
    assert ext.concurrency == 7 and ext.window_seconds == 60.0
    # rates and latency: drive a fake clock from here on
    clock = Clock()
    ext.clock = clock
    ext._samples.clear()
    ext._samples.append((clock.now, 0, 0))
    stats = crawler.stats
    assert stats is not None
    spider = Spider("t")
    for latency in (0.1, 0.3):
        request = Request("https://a.example/", meta={"download_latency": latency})
        crawler.signals.send_catch_log(
            signals.response_received,
            response=Response("https://a.example/", request=request),
            request=request,
            spider=spider,
        )
    stats.set_value("response_received_count", 30)
    stats.set_value("item_scraped_count", 12)
    stats.set_value("downloader/response_status_count/200", 28)
    stats.set_value("downloader/response_status_count/404", 2)
    stats.set_value("downloader/exception_count", 3)
    stats.set_value("spider_exceptions/count", 1)
    stats.set_value("log_count/ERROR", 4)
    clock.now += 30
    status = ext.status()
    assert status["pages_per_min"] == 60.0 and status["items_per_min"] == 24.0
    assert status["pages"] == 30 and status["items"] == 12
    assert status["responses"] == {"200": 28, "404": 2}
    assert status["errors"] == {"spider_exceptions": 1, "download_errors": 3, "log_errors": 4}
    assert status["latency_ms"] == 200.0
    assert status["concurrency"] == 7
    assert status["in_flight"] is None  # no engine yet
    assert isinstance(status["cpu_percent"], float) and status["rss_bytes"] > 1_000_000
    assert status["loop_lag_max_ms"] is None
    json.dumps(status)  # publishable as is
    # 90 s later, 30 more pages: only the last 60 s count, and the latency is forgotten
    clock.now += 60
    stats.set_value("response_received_count", 60)
    status = ext.status()
    assert status["pages_per_min"] == 30.0 and status["items_per_min"] == 0.0
    assert status["latency_ms"] is None


def test_settings_are_validated() -> None:
    from crawlfleet.exceptions import ConfigError

    crawler = get_crawler(Spider, {"CRAWLFLEET_TELEMETRY_LOOP_LAG_SECONDS": 0})
    with pytest.raises(ConfigError, match="CRAWLFLEET_TELEMETRY_LOOP_LAG_SECONDS"):
        Telemetry.from_crawler(crawler)


def test_loop_lag_probe_sees_a_blocked_loop() -> None:
    ext = Telemetry(None, loop_lag_seconds=0.02)

    async def main() -> dict[str, Any]:
        ext.start_loop_probe(asyncio.get_running_loop())
        await asyncio.sleep(0.1)
        time.sleep(0.15)  # block the loop: the next timer fires late
        await asyncio.sleep(0.05)
        ext.stop_loop_probe()
        return ext.status()

    status = asyncio.run(main())
    assert status["loop_lag_max_ms"] >= 100
    assert 0 <= status["loop_lag_mean_ms"] <= status["loop_lag_max_ms"]
    assert ext._probe._handle is None


@pytest.fixture
def site() -> Iterator[TestSite]:
    with TestSite(SiteModel(pages=400, hosts=2), latency_seconds=0.05, timeout_seconds=5) as s:
        yield s


@pytest.mark.slow
def test_a_crawling_node_publishes_its_figures(
    site: TestSite,
    redis_server_url: str,
    key_prefix: str,
    node_env: dict[str, str],
    tmp_path: Path,
) -> None:
    settings = {
        **node_env,
        "EXTENSIONS": json.dumps({TELEMETRY: 500}),
        "CONCURRENT_REQUESTS": 2,
        "LOG_LEVEL": "INFO",
        "CRAWLFLEET_HEARTBEAT_SECONDS": 0.5,
        "CRAWLFLEET_LEASE_SECONDS": 3,
        "CRAWLFLEET_TELEMETRY_LOOP_LAG_SECONDS": 0.1,
    }
    proc = start_node(
        SPIDER,
        job="tele",
        redis_url=redis_server_url,
        log=tmp_path / "node.log",
        spider_args={"start_urls": ",".join(site.seed_urls)},
        settings=settings,
        cwd=ROOT,
    )
    client = redis.Redis.from_url(redis_server_url)
    try:
        key = JobKeys.of(key_prefix, "tele").nodeinfo
        deadline = time.monotonic() + 30
        seen: dict[str, Any] = {}
        while time.monotonic() < deadline and proc.poll() is None:
            for raw in client.hvals(key):
                seen = json.loads(raw)
            if (seen.get("pages_per_min") or 0) > 0 and seen.get("loop_lag_max_ms") is not None:
                break
            time.sleep(0.2)
        log = (tmp_path / "node.log").read_text(errors="replace")[-3000:]
        assert (seen.get("pages_per_min") or 0) > 0, (seen, log)
        assert isinstance(seen["cpu_percent"], (int, float)), seen
        assert seen["rss_bytes"] > 0 and seen["concurrency"] == 2
        assert isinstance(seen["in_flight"], int)
        assert seen["responses"].get("200", 0) > 0
        assert seen["loop_lag_max_ms"] is not None
    finally:
        client.close()
        if proc.poll() is None:
            proc.terminate()
        if wait_all([proc], 20) == [None]:
            proc.kill()
            proc.wait()


def test_an_item_preview_is_cut_down_and_leaves_bookkeeping_out() -> None:
    item = {
        "_type": "product",
        "_key": "abc",
        "_encoding": "utf-8",
        "title": "t" * 500,
        "price": 9.5,
        "tags": ["a", "b"],
        "ok": True,
        "none": None,
        **{f"f{i}": i for i in range(10)},
    }
    shown = preview(item)
    assert list(shown)[:7] == ["_type", "title", "price", "tags", "ok", "none", "f0"]
    assert len(shown) == PREVIEW_FIELDS and "_key" not in shown
    assert shown["title"] == "t" * PREVIEW_CHARS and shown["price"] == 9.5
    assert shown["tags"] == "['a', 'b']" and shown["ok"] is True and shown["none"] is None


def test_the_status_shows_the_latest_items_newest_first() -> None:
    ext = Telemetry(None, latest_items=2)
    for n in range(3):
        ext.item_scraped({"n": n})
    assert ext.status()["latest_items"] == [{"n": 2}, {"n": 1}]
    assert Telemetry(None, latest_items=0).status()["latest_items"] == []
