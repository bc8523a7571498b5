"""Several real node processes crawling one job on the bundled test site."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from crawlfleet.node.launcher import start_node, wait_all
from crawlfleet.redis.embedded import EmbeddedRedis, find_redis_server
from crawlfleet.redis.keys import JobKeys
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import TestSite
from tests.support.nodes import node_logs, site_node

pytestmark = pytest.mark.slow

SPIDER = "crawlfleet.testsite.spider:TestSiteSpider"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def site() -> Iterator[TestSite]:
    with TestSite(SiteModel(pages=240, hosts=3), latency_seconds=0.05, timeout_seconds=5) as s:
        yield s


def node_settings(node_env: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        **node_env,
        "CONCURRENT_REQUESTS": 4,
        "DOWNLOAD_TIMEOUT": 1,
        "RETRY_TIMES": 1,
        "LOG_LEVEL": "INFO",
        "CRAWLFLEET_LEASE_SECONDS": 3,
        "CRAWLFLEET_HEARTBEAT_SECONDS": 0.5,
        "CRAWLFLEET_RECLAIM_SECONDS": 0.5,
        "CRAWLFLEET_FINISH_GRACE_SECONDS": 1,
        **extra,
    }


def start_nodes(
    n: int,
    site: TestSite,
    url: str,
    tmp_path: Path,
    settings: dict[str, Any],
    spider: str = SPIDER,
    job: str = "crawl",
    first: int = 0,
) -> list[subprocess.Popen[bytes]]:
    return [
        site_node(
            site,
            job=job,
            redis_url=url,
            log=tmp_path / f"node{i}.log",
            settings=settings,
            spider=spider,
            output=tmp_path / f"items{i}.jsonl",
        )
        for i in range(first, first + n)
    ]


def items(tmp_path: Path) -> list[dict[str, Any]]:
    out = []
    for p in tmp_path.glob("items*.jsonl"):
        out += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return out


def assert_complete(site: TestSite, tmp_path: Path, *, exact: bool = True) -> None:
    stats = site.stats()
    assert stats["never_fetched"] == [], node_logs(tmp_path)[-3000:]
    if exact:
        assert stats["fetched_twice"] == []
    if exact:
        # one item per product/article page. (After a kill -9, the feed file of the
        # killed node loses what was still in its write buffer: feed exports are not a
        # durable store, so only pages are checked then.)
        assert len(items(tmp_path)) == site.model.pages
        assert len({i["url"] for i in items(tmp_path)}) == site.model.pages


def finish(procs: Sequence[subprocess.Popen[bytes]], tmp_path: Path, timeout: float = 90) -> None:
    codes = wait_all(procs, timeout)
    for p in procs:
        if p.poll() is None:
            p.kill()
    assert all(c == 0 for c in codes), f"exit codes {codes}\n{node_logs(tmp_path)[-4000:]}"


def wait_for_pages(site: TestSite, count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while site.stats()["content_fetched"] < count:
        assert time.monotonic() < deadline, "crawl did not get going"
        time.sleep(0.05)


def test_three_nodes_crawl_every_page_exactly_once(
    site: TestSite, redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    procs = start_nodes(3, site, redis_server_url, tmp_path, node_settings(node_env))
    finish(procs, tmp_path)
    assert_complete(site, tmp_path)
    text = node_logs(tmp_path)
    assert text.count("Spider closed (finished)") == 3
    # every node did part of the work
    for i in range(3):
        assert (tmp_path / f"items{i}.jsonl").read_text().strip(), f"node {i} did nothing"


def test_start_requests_enter_the_job_once(
    site: TestSite, redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    spider = "tests.support.node_spiders:StartUrlsSpider"
    procs = start_nodes(2, site, redis_server_url, tmp_path, node_settings(node_env), spider=spider)
    finish(procs, tmp_path)
    assert_complete(site, tmp_path)


@pytest.mark.parametrize("kill_after_pages", [10, 90, 170])
def test_kill_9_of_a_node_loses_nothing(
    site: TestSite,
    redis_server_url: str,
    node_env: dict[str, str],
    tmp_path: Path,
    kill_after_pages: int,
) -> None:
    procs = start_nodes(2, site, redis_server_url, tmp_path, node_settings(node_env))
    wait_for_pages(site, kill_after_pages)
    procs[0].send_signal(signal.SIGKILL)
    procs[0].wait()
    finish(procs[1:], tmp_path)
    # pages the killed node had leased come back after their lease expired: some may
    # be fetched twice (the node died between fetch and acknowledgement), none is lost
    assert_complete(site, tmp_path, exact=False)


def test_a_killed_nodes_leases_return_before_they_expire(
    site: TestSite, redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    # leases of a minute: only dead-node detection (1.5 s without a heartbeat) can
    # bring the killed node's work back in time for the survivor to finish quickly
    settings = node_settings(
        node_env, CRAWLFLEET_LEASE_SECONDS=60, CRAWLFLEET_NODE_TIMEOUT_SECONDS=1.5
    )
    procs = start_nodes(2, site, redis_server_url, tmp_path, settings)
    wait_for_pages(site, 60)
    killed = time.monotonic()
    procs[0].send_signal(signal.SIGKILL)
    procs[0].wait()
    finish(procs[1:], tmp_path, timeout=50)
    assert time.monotonic() - killed < 40, "waited for the leases to expire"
    assert_complete(site, tmp_path, exact=False)


def test_malformed_entry_is_set_aside_and_the_crawl_goes_on(
    site: TestSite,
    sync_redis: redis.Redis,
    redis_server_url: str,
    node_env: dict[str, str],
    tmp_path: Path,
) -> None:
    keys = JobKeys.of(node_env["CRAWLFLEET_KEY_PREFIX"], "crawl")
    sync_redis.hset(keys.req, "999999", b"0\x00127.0.0.1\x00\x01garbage")
    sync_redis.zadd(keys.queue("127.0.0.1"), {"999999": 0})
    sync_redis.zadd(keys.sites, {"127.0.0.1": 0})
    sync_redis.hincrby(keys.counters, "queued", 1)
    procs = start_nodes(2, site, redis_server_url, tmp_path, node_settings(node_env))
    finish(procs, tmp_path)
    assert_complete(site, tmp_path)
    said = f"Malformed frontier entry 999999 in {keys.req} set aside (job crawl): "
    assert said in node_logs(tmp_path)
    assert sync_redis.lrange(keys.bad, 0, -1) == [b"0\x00127.0.0.1\x00\x01garbage"]


def test_seed_list_is_read_and_invalid_seeds_are_reported(
    site: TestSite,
    sync_redis: redis.Redis,
    redis_server_url: str,
    node_env: dict[str, str],
    tmp_path: Path,
) -> None:
    key = f"{node_env['CRAWLFLEET_KEY_PREFIX']}:seeds"
    sync_redis.rpush(
        key,
        site.seed_urls[0],
        "not a url",
        json.dumps({"url": site.seed_urls[1], "priority": 5}),
        '{"nourl": 1}',
        site.seed_urls[2],
    )
    procs = [
        start_node(
            SPIDER,
            job="seeded",
            redis_url=redis_server_url,
            log=tmp_path / f"node{i}.log",
            output=tmp_path / f"items{i}.jsonl",
            spider_args={"start_urls": "http://127.0.0.1:1/unused"},
            settings=node_settings(
                node_env, CRAWLFLEET_START_URLS_KEY=key, CRAWLFLEET_START_REQUESTS_ONCE=True
            ),
            cwd=ROOT,
        )
        for i in range(2)
    ]
    finish(procs, tmp_path)
    text = node_logs(tmp_path)
    assert f"Unreadable seed b'not a url' in {key} set aside" in text
    assert f"Unreadable seed b'{{\"nourl\": 1}}' in {key} set aside" in text
    assert sync_redis.llen(key) == 0
    stats = site.stats()
    assert stats["never_fetched"] == [] and stats["fetched_twice"] == []


def test_scheduler_honours_scrapy_contracts(
    site: TestSite, redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "contract.json"
    base = site.seed_urls[0].rstrip("/")
    proc = start_node(
        "tests.support.node_spiders:ContractSpider",
        job="contract",
        redis_url=redis_server_url,
        log=tmp_path / "node0.log",
        spider_args={"base": base, "out": str(out)},
        settings=node_settings(node_env),
        cwd=ROOT,
    )
    finish([proc], tmp_path)
    result = json.loads(out.read_text())
    p = base + "/p/{}"
    # priority first, FIFO among equals, dont_filter twice, duplicates dropped
    assert result["order"] == [p.format(9), p.format(3), p.format(6), p.format(6), p.format(12)]
    assert sorted(result["dropped"]) == sorted([p.format(3), base + "/"])
    stats = result["stats"]
    assert stats["crawlfleet/scheduler/duplicates"] == 2
    assert stats["dupefilter/filtered"] == 2
    # the repeat of /p/3 and the link back to / were sent by this node already: dropped
    # locally, without a round trip
    assert stats["crawlfleet/scheduler/enqueued"] == 6
    assert stats["crawlfleet/frontier/acked"] == 6
    assert stats["crawlfleet/redis/round_trips"] > 0
    assert result["reason"] == "finished"


class RedisProcess:
    """A redis-server of the test's own, with AOF, restartable on the same port."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                find_redis_server(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.dir),
                "--appendonly",
                "yes",
                "--save",
                "",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                if redis.Redis(port=self.port, socket_connect_timeout=0.5).ping():
                    return
            except (redis.ConnectionError, redis.BusyLoadingError):
                pass
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)

    def stop(self, *, kill: bool = False) -> None:
        if self.proc is None:
            return
        if kill:
            self.proc.kill()
        else:
            self.proc.send_signal(signal.SIGTERM)  # redis saves the AOF on SIGTERM
        self.proc.wait(timeout=20)
        self.proc = None


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path / "redis")
    server.start()
    yield server
    server.stop(kill=True)


def test_stop_everything_and_redis_then_resume(
    site: TestSite, own_redis: RedisProcess, node_env: dict[str, str], tmp_path: Path
) -> None:
    settings = node_settings(node_env)
    procs = start_nodes(2, site, own_redis.url, tmp_path, settings)
    wait_for_pages(site, 80)
    for p in procs:
        p.send_signal(signal.SIGKILL)
        p.wait()
    own_redis.stop()
    fetched_before = site.stats()["content_fetched"]
    assert fetched_before < site.model.pages, "the crawl finished before the stop"
    own_redis.start()
    procs = start_nodes(2, site, own_redis.url, tmp_path, settings, first=2)
    finish(procs, tmp_path)
    assert_complete(site, tmp_path, exact=False)
    # resumed, not restarted: the pages fetched before were not all fetched again
    assert len(site.stats()["fetched_twice"]) < fetched_before / 2


def test_redis_restart_during_the_crawl(
    site: TestSite, own_redis: RedisProcess, node_env: dict[str, str], tmp_path: Path
) -> None:
    procs = start_nodes(
        2,
        site,
        own_redis.url,
        tmp_path,
        node_settings(node_env, CRAWLFLEET_REDIS_RETRY_MAX_SECONDS=1),
    )
    wait_for_pages(site, 60)
    own_redis.stop()
    time.sleep(2)
    own_redis.start()
    finish(procs, tmp_path)
    assert_complete(site, tmp_path, exact=False)
    text = node_logs(tmp_path)
    assert "Redis unreachable" in text and "Redis reachable again" in text


def test_embedded_redis_is_shared_and_stopped_by_the_last_user(tmp_path: Path) -> None:
    a, b = EmbeddedRedis(tmp_path), EmbeddedRedis(tmp_path)
    url = a.acquire()
    assert b.acquire() == url
    client = redis.Redis.from_url(url)
    client.set("k", "v")
    assert a.release() is False  # b still uses it
    assert client.get("k") == b"v"
    assert b.release() is True
    with pytest.raises(redis.ConnectionError):
        client.ping()
    c = EmbeddedRedis(tmp_path)
    url = c.acquire()  # started again from its AOF
    assert redis.Redis.from_url(url).get("k") == b"v"
    c.release()
    assert os.path.exists(tmp_path / "redis" / "appendonly.aof") or any(
        (tmp_path / "redis").glob("appendonly*")
    )
