"""A scrapy-redis project switches by adding the add-on, nothing else (issue 21).

With the real scrapy-redis package: its settings are taken over and said in one
WARNING; a setting whose meaning cannot be kept is refused in one line; crawlfleet's
Redis falls back to REDIS_URL, then REDIS_HOST/REDIS_PORT; a spider's start URLs are
read where scrapy-redis reads them (a list, a set or a sorted set), by one node at a
time. End to end: RedisSpider and RedisCrawlSpider subclasses in a project that keeps
every scrapy-redis setting, two ``scrapy crawl`` nodes, seeds pushed as scrapy-redis
documents: every page once, nodes that exit by themselves, items in ``<spider>:items``
and in crawlfleet's store, one per page. Real Redis, real processes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from scrapy import Request, Spider, signals
from scrapy.exceptions import DontCloseSpider
from scrapy.settings import Settings
from scrapy.utils.request import RequestFingerprinter
from scrapy.utils.test import get_crawler
from scrapy_redis.spiders import RedisSpider

from crawlfleet import addon as addon_module
from crawlfleet.addon import SCHEDULER, Addon
from crawlfleet.exceptions import ConfigError
from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.config import FrontierConfig
from crawlfleet.frontier.records import Outgoing
from crawlfleet.node.redisspider import adopt, seed_source
from crawlfleet.node.scheduler import Scheduler
from crawlfleet.node.seeds import SeedReader, requests_from_seed
from crawlfleet.redis.config import RedisConfig
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys, seed_keys
from crawlfleet.settings.config import apply_defaults, settings_with_defaults
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.process import fetch_stats, start_site_process, stop_site_process
from tests.support.cli import cli, make_project
from tests.support.cores import node_core

#: rates, send times and deadlines: ./dev.sh test runs these alone
pytestmark = pytest.mark.timing

SCRAPY_REDIS_SETTINGS = {
    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "SCHEDULER_PERSIST": True,
    "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.SpiderPriorityQueue",
    "REDIS_START_URLS_AS_SET": True,
    "REDIS_URL": "redis://:s3cret@127.0.0.1:6379/0",
    "ITEM_PIPELINES": {"scrapy_redis.pipelines.RedisPipeline": 300},
    "STATS_CLASS": "scrapy_redis.stats.RedisStatsCollector",
}


def project_settings(values: dict[str, Any]) -> Settings:
    settings = Settings()
    for name, value in values.items():
        settings.set(name, value, priority="project")
    return settings


# -- the add-on takes over ---------------------------------------------------------------
def test_the_addon_takes_over_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    """SCHEDULER and DUPEFILTER_CLASS at the project's priority are replaced; one WARNING
    lists each scrapy-redis setting with what crawlfleet does with it, once however
    many times the settings are built; the password of REDIS_URL is never shown."""
    addon_module._said.clear()
    caplog.set_level(logging.WARNING, logger="crawlfleet")
    for _ in range(2):
        settings = project_settings(SCRAPY_REDIS_SETTINGS)
        Addon().update_settings(settings)
        assert settings["SCHEDULER"] == SCHEDULER
        assert settings["DUPEFILTER_CLASS"] == "scrapy.dupefilters.BaseDupeFilter"
        assert settings["ITEM_PIPELINES"]["scrapy_redis.pipelines.RedisPipeline"] == 300
    warnings = [r for r in caplog.records if "takes over from scrapy-redis" in r.getMessage()]
    assert len(warnings) == 1
    text = warnings[0].getMessage()
    for name in (
        "SCHEDULER scrapy_redis.scheduler.Scheduler: replaced",
        "DUPEFILTER_CLASS scrapy_redis.dupefilter.RFPDupeFilter: replaced",
        "SCHEDULER_PERSIST: True: the job's state always persists",
        "SCHEDULER_QUEUE_CLASS: not used",
        "REDIS_START_URLS_AS_SET: True: a list, a set or a sorted set is read by the key's",
        "REDIS_URL: used: crawlfleet's Redis is here",
        "STATS_CLASS: kept",
    ):
        assert name in text, text
    assert "s3cret" not in text
    # a project without scrapy-redis: no word of it
    caplog.clear()
    Addon().update_settings(project_settings({"DOWNLOAD_DELAY": 1}))
    assert not [r for r in caplog.records if "scrapy-redis" in r.getMessage()]


def test_a_scheduler_of_the_projects_own_is_left_alone() -> None:
    settings = project_settings({"SCHEDULER": "proj.MyScheduler"})
    Addon().update_settings(settings)
    assert settings["SCHEDULER"] == "proj.MyScheduler"


# -- crawlfleet's Redis ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("values", "url", "source"),
    [
        (
            {"CRAWLFLEET_REDIS_URL": "redis://a:1/0", "REDIS_URL": "redis://b:2/0"},
            "redis://a:1/0",
            "CRAWLFLEET_REDIS_URL",
        ),
        ({"REDIS_URL": "redis://:pw@b:2/3", "REDIS_HOST": "c"}, "redis://:pw@b:2/3", "REDIS_URL"),
        ({"REDIS_HOST": "c", "REDIS_PORT": 7000}, "redis://c:7000/0", "REDIS_HOST/REDIS_PORT"),
        (
            {"REDIS_HOST": "c", "REDIS_PARAMS": {"password": "p@ss", "db": 2, "socket_timeout": 3}},
            "redis://:p%40ss@c:6379/2",
            "REDIS_HOST/REDIS_PORT",
        ),
        (
            {"REDIS_PORT": 6380, "REDIS_PARAMS": {"ssl": True}},
            "rediss://localhost:6380/0",
            "REDIS_HOST/REDIS_PORT",
        ),
        (
            {"REDIS_URL": "redis://b:2/3", "REDIS_PARAMS": {"password": "pw"}},
            "redis://:pw@b:2/3",
            "REDIS_URL",
        ),
        ({}, "", "embedded"),
    ],
)
def test_redis_url_falls_back_to_scrapy_redis_settings(
    values: dict[str, Any], url: str, source: str
) -> None:
    config = RedisConfig.from_settings(settings_with_defaults(values))
    assert (config.url, config.url_source) == (url, source)


def test_redis_params_a_url_cannot_say_are_refused() -> None:
    settings = settings_with_defaults({"REDIS_HOST": "c", "REDIS_PARAMS": {"ssl_ca_certs": "x"}})
    with pytest.raises(ConfigError, match=r"REDIS_PARAMS has ssl_ca_certs.*CRAWLFLEET_REDIS_URL"):
        RedisConfig.from_settings(settings)


def test_verbose_says_which_setting_gave_the_redis_url(
    redis_server_url: str, tmp_path: Path
) -> None:
    """`crawlfleet -v` names the setting the URL came from; the password stays hidden."""
    url = redis_server_url.replace("redis://", "redis://:nopw-s3cret@", 1)
    make_project(tmp_path, f"REDIS_URL = {url!r}\n")
    r = cli("-v", "status", cwd=tmp_path)
    assert "from REDIS_URL" in r.stderr, r.stderr
    assert "nopw-s3cret" not in r.stdout + r.stderr


# -- where the start URLs are -----------------------------------------------------------
class Plain(Spider):
    name = "plain"


class KeyedRedisSpider(RedisSpider):  # type: ignore[misc]
    name = "myspider_redis"
    redis_key = "myspider:start_urls"


class DefaultRedisSpider(RedisSpider):  # type: ignore[misc]
    name = "default_redis"


def built(spidercls: type[Spider], values: dict[str, Any], **kwargs: Any) -> tuple[Any, Any]:
    settings = {**values}
    crawler = get_crawler(spidercls, settings)
    crawler.settings.frozen = False
    apply_defaults(crawler.settings)
    return crawler, spidercls.from_crawler(crawler, **kwargs)


@pytest.mark.parametrize(
    ("spidercls", "values", "kwargs", "key", "batch"),
    [
        (KeyedRedisSpider, {}, {}, "myspider:start_urls", 16),
        (KeyedRedisSpider, {}, {"redis_key": "%(name)s:urls"}, "myspider_redis:urls", 16),
        (KeyedRedisSpider, {"CONCURRENT_REQUESTS": 4}, {}, "myspider:start_urls", 4),
        (DefaultRedisSpider, {"REDIS_START_URLS_KEY": "q:%(name)s"}, {}, "q:default_redis", 16),
        (DefaultRedisSpider, {}, {}, "default_redis:start_urls", 16),
        (Plain, {"REDIS_START_URLS_KEY": "q:%(name)s"}, {}, "q:plain", 100),
        (Plain, {"REDIS_START_URLS_BATCH_SIZE": 7}, {"redis_key": "k"}, "k", 7),
        (Plain, {}, {}, "plain:start_urls", 100),
    ],
)
def test_the_start_url_key_is_where_the_spider_reads_it(
    spidercls: type[Spider], values: dict[str, Any], kwargs: dict[str, Any], key: str, batch: int
) -> None:
    crawler, spider = built(spidercls, values, **kwargs)
    config = FrontierConfig.from_settings(crawler.settings, spider.name)
    source = seed_source(spider, crawler.settings, config.start_urls_key)
    assert (source.key, source.batch) == (key, batch)


def test_a_redis_spiders_own_reading_is_off(redis_server_url: str, key_prefix: str) -> None:
    """Its start_requests read nothing and its idle hook (which raised DontCloseSpider
    and read the key itself) is disconnected: the node reads the key through the
    frontier and closes when the job is finished."""
    crawler, spider = built(
        KeyedRedisSpider, {"REDIS_URL": redis_server_url}, redis_key=f"{key_prefix}:k"
    )
    before = crawler.signals.send_catch_log(signals.spider_idle, spider=spider)
    assert [type(failure.value) for _handler, failure in before] == [DontCloseSpider]
    assert adopt(crawler, spider)
    assert list(spider.start_requests()) == []
    assert crawler.signals.send_catch_log(signals.spider_idle, spider=spider) == []
    assert not adopt(crawler, Plain())


def test_seeds_are_made_by_the_spiders_own_method_with_their_priority() -> None:
    """A RedisSpider's make_request_from_data gets the entry as bytes, as scrapy-redis
    gives it; a JSON entry's priority is kept (scrapy-redis's own method would send it
    as form data); a method of the spider's own gets the entry untouched."""
    _crawler, spider = built(KeyedRedisSpider, {})
    [plain] = requests_from_seed(spider, b"http://a.test/1")
    assert plain.url == "http://a.test/1" and plain.priority == 0
    [json_seed] = requests_from_seed(
        spider, b'{"url": "http://a.test/2", "priority": 7, "meta": {"k": 1}}'
    )
    assert (json_seed.url, json_seed.priority, json_seed.meta["k"]) == ("http://a.test/2", 7, 1)

    seen: list[Any] = []

    class Custom(KeyedRedisSpider):
        def make_request_from_data(self, data: Any) -> Any:
            seen.append(data)
            url, _, n = data.decode().partition("|")
            return [Request(f"{url}/{i}") for i in range(int(n))]

    _crawler, custom = built(Custom, {})
    made = requests_from_seed(custom, b"http://a.test|2")
    assert [r.url for r in made] == ["http://a.test/0", "http://a.test/1"]
    assert seen == [b"http://a.test|2"]
    with pytest.raises(ValueError, match="no request"):
        requests_from_seed(spider, b'{"no_url": 1}')


@pytest.mark.parametrize("kind", ["list", "set", "zset"])
def test_a_seed_key_is_read_by_one_node_at_a_time(
    redis_server_url: str, key_prefix: str, kind: str
) -> None:
    """Two nodes read the same key at once: one reads a batch, the other waits (the key
    is "busy"); every entry is queued once and removed; an unreadable one is set aside
    with a WARNING naming the key; a key of another type says so."""

    async def body() -> None:
        client = make_client(redis_server_url)
        key = f"{key_prefix}:seeds"
        keys = seed_keys(key)
        entries = [f"http://a.test/{i}".encode() for i in range(25)] + [b"not a url"]
        try:
            if kind == "list":
                await client.lpush(key, *entries)
            elif kind == "set":
                await client.sadd(key, *entries)
            else:
                await client.zadd(key, {e: i for i, e in enumerate(entries)})
            frontier = Frontier(client, JobKeys.of(key_prefix, "job"))
            await frontier.register_job()
            readers = [
                SeedReader(
                    node_core(
                        frontier,
                        f"n{i}",
                        {"CRAWLFLEET_LEASE_SECONDS": 5},
                        start_urls_key=key,
                        start_urls_batch=10,
                    )
                )
                for i in range(2)
            ]
            queued: list[str] = []
            fp = RequestFingerprinter().fingerprint

            def make(raw: bytes) -> list[Any]:
                request = requests_from_seed(None, raw)[0]
                return [(request, fp(request)[:16], raw, 0)]

            async def queue(outgoing: list[Any]) -> None:
                await asyncio.sleep(0.05)  # the other node reads meanwhile
                result = await frontier.commit(
                    "n", [Outgoing(o[1], "a.test", 0, o[2]) for o in outgoing]
                )
                queued.extend(o[0].url for o in outgoing)
                assert result.queued == len(outgoing)

            for _ in range(6):
                await asyncio.gather(*(r.pull(make, queue, 0.0) for r in readers))
            assert sorted(queued) == sorted(e.decode() for e in entries[:-1])
            assert await client.exists(key) == 0
            assert await client.lrange(keys.unreadable, 0, -1) == [b"not a url"]
            assert await client.exists(keys.reader) == 0
            await client.hset(key, "a", "b")
            await readers[0].pull(make, queue, 0.0)
            assert not readers[0].waiting
        finally:
            await client.delete(key, keys.reader, keys.unreadable)
            await client.aclose()

    asyncio.run(body())


def test_a_job_is_finished_only_once_its_seed_key_was_read_empty() -> None:
    """Seeds pushed while the job winds down are not left behind: the job counts as
    finished only after a read of the seed key that began once it looked finished."""
    from crawlfleet.frontier.records import JobState
    from crawlfleet.node.engine import EngineHooks
    from crawlfleet.node.lifecycle import Lifecycle

    config = FrontierConfig.from_settings(
        settings_with_defaults({"CRAWLFLEET_FINISH_GRACE_SECONDS": 0.3}), "job"
    )
    lifecycle = Lifecycle(config, EngineHooks(), "n")
    done = JobState(now_ms=0, queued=0, leased=0, live_nodes=1, busy_others=0, leased_total=5)
    lifecycle.update(done, True, False, 10.0, seeds_read_at=9.0)
    assert lifecycle.empty_since == 10.0
    lifecycle.update(done, True, False, 11.0, seeds_read_at=9.0)  # grace over, no new read
    assert not lifecycle.finished
    lifecycle.update(done, True, False, 11.1, seeds_read_at=10.5)
    assert lifecycle.finished


# -- SCHEDULER_FLUSH_ON_START -----------------------------------------------------------
def test_flush_on_start_is_refused_while_other_nodes_work(
    redis_server_url: str, key_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With another node alive on the job, SCHEDULER_FLUSH_ON_START is refused in one
    line saying what to do instead; with none, the job starts over, reset by one of
    the nodes that start together (the others are refused)."""

    async def body() -> None:
        client = make_client(redis_server_url)
        settings = settings_with_defaults({"CRAWLFLEET_KEY_PREFIX": key_prefix})
        config = FrontierConfig.from_settings(settings, "flushed")
        frontier = Frontier(client, JobKeys.of(key_prefix, "flushed"))
        try:
            await frontier.commit("x", [Outgoing(b"f" * 16, "a.test", 0, b"{}")])
            await frontier.heartbeat(
                "other", ttl_ms=5000, status="{}", busy=True, lease_ms=1000, renew=[]
            )

            def scheduler() -> Scheduler:
                s = Scheduler(
                    client=client,
                    config=config,
                    redis_config=RedisConfig.from_settings(settings),
                    fingerprint=RequestFingerprinter().fingerprint,
                )
                s.flush_on_start = True
                return s

            refused = scheduler()
            with pytest.raises(ConfigError) as info:
                await refused.start(Spider("flushed"))
            assert str(info.value) == (
                "SCHEDULER_FLUSH_ON_START = True would delete job 'flushed' while 1 other "
                "node(s) work on it: remove the setting (the job's state persists), and to "
                "start over stop its nodes and run `crawlfleet job reset flushed`"
            )
            assert (await frontier.counters()).get("queued") == 1  # nothing deleted
            await frontier.heartbeat(
                "other", ttl_ms=5000, status="leaving", busy=False, lease_ms=1000, renew=[]
            )
            # two nodes starting together: one resets the job, the other is refused
            both = [scheduler(), scheduler()]
            results = await asyncio.gather(
                *(s.start(Spider("flushed")) for s in both), return_exceptions=True
            )
            assert sorted(type(r).__name__ for r in results) == ["ConfigError", "NoneType"]
            assert (await frontier.counters()).get("queued", 0) == 0
            started = both[results.index(None)]
            assert started.node_id in await frontier.live_nodes()  # the reset kept it
            await started.stop("finished")
        finally:
            await client.aclose()

    asyncio.run(body())


# -- end to end ---------------------------------------------------------------------------
SPIDERS = '''
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import Rule
from scrapy_redis.spiders import RedisCrawlSpider, RedisSpider

from crawlfleet.testsite.spider import TestSiteSpider


class MySpider(RedisSpider):
    """As scrapy-redis's example: reads its redis_key."""

    name = "myspider_redis"
    redis_key = "myspider:start_urls"

    def parse(self, response):
        item = TestSiteSpider.extract_item(response)
        if item is not None:
            yield item
        yield from response.follow_all(css="a", callback=self.parse)


class MyCrawler(RedisCrawlSpider):
    name = "mycrawler_redis"
    redis_key = "mycrawler:start_urls"
    rules = (Rule(LinkExtractor(), callback="parse_page", follow=True),)

    def parse_start_url(self, response, **kwargs):
        return self.parse_page(response)

    def parse_page(self, response):
        item = TestSiteSpider.extract_item(response)
        return [item] if item is not None else []
'''

LOG_FORMAT = "%(asctime)s.%(msecs)03d [%(name)s] %(levelname)s: %(message)s"
SITE = SiteModel(pages=40, hosts=1, problems=False)


def node_logs(tmp_path: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(tmp_path.glob("node*.log")))


@pytest.mark.parametrize(
    ("spider", "kind"),
    [("myspider_redis", "list"), ("mycrawler_redis", "set"), ("myspider_redis", "zset")],
)
def test_a_scrapy_redis_project_switches_by_the_addon_alone(
    redis_server_url: str,
    key_prefix: str,
    sync_redis: redis.Redis,
    tmp_path: Path,
    spider: str,
    kind: str,
) -> None:
    """The project keeps every scrapy-redis setting and adds the add-on; two `scrapy
    crawl` nodes; seeds pushed as scrapy-redis documents (LPUSH, SADD, ZADD) to the
    spider's redis_key: every page fetched once, both nodes exit by themselves soon
    after the job is finished, items in `<spider>:items` and in crawlfleet's store."""
    as_set = "REDIS_START_URLS_AS_SET = True\n" if kind == "set" else ""
    as_zset = "REDIS_START_URLS_AS_ZSET = True\n" if kind == "zset" else ""
    make_project(
        tmp_path / "proj",
        f"""
        SCHEDULER = "scrapy_redis.scheduler.Scheduler"
        DUPEFILTER_CLASS = "scrapy_redis.dupefilter.RFPDupeFilter"
        SCHEDULER_PERSIST = True
        SCHEDULER_QUEUE_CLASS = "scrapy_redis.queue.SpiderPriorityQueue"
        REDIS_URL = {redis_server_url!r}
        REDIS_ITEMS_KEY = "{key_prefix}:%(spider)s:items"
        ITEM_PIPELINES = {{"scrapy_redis.pipelines.RedisPipeline": 300}}
        """
        + as_set
        + as_zset,
    )
    (tmp_path / "proj" / "proj" / "spiders" / "redis_spiders.py").write_text(SPIDERS)
    seed_key = f"{key_prefix}:{spider}:start_urls"
    items_key = f"{key_prefix}:{spider}:items"
    db = tmp_path / "items.sqlite3"
    site, port = start_site_process(SITE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCRAPY_", "CRAWLFLEET_"))}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(2):
            with (tmp_path / f"node{i}.log").open("wb") as log:
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "scrapy",
                            "crawl",
                            spider,
                            "-a",
                            f"redis_key={seed_key}",
                            "-s",
                            f"CRAWLFLEET_KEY_PREFIX={key_prefix}",
                            "-s",
                            f"CRAWLFLEET_DATA_DIR={tmp_path / 'data'}",
                            "-s",
                            "CRAWLFLEET_STORES=sql",
                            "-s",
                            f"CRAWLFLEET_SQL_URL=sqlite:///{db}",
                            "-s",
                            "CRAWLFLEET_STORE_BATCH_SECONDS=0.1",
                            "-s",
                            "CRAWLFLEET_HEARTBEAT_SECONDS=0.5",
                            "-s",
                            "CONCURRENT_REQUESTS=4",
                            "-s",
                            "LOG_LEVEL=INFO",
                            "-s",
                            f"LOG_FORMAT={LOG_FORMAT}",
                        ],
                        cwd=tmp_path / "proj",
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
        root, page = SITE.url(0, port), SITE.url(5, port)
        entries: list[bytes] = [
            root.encode(),
            json.dumps({"url": page, "priority": 5, "meta": {"seeded": 1}}).encode(),
            b'{"no_url": 1}',  # scrapy-redis makes no request of it: set aside
        ]
        # the nodes start before the seeds, as they usually do, and say where they wait
        deadline = time.monotonic() + 60
        while node_logs(tmp_path).count(f"waiting for seeds (in {seed_key} or") < 2:
            assert time.monotonic() < deadline, node_logs(tmp_path)[-3000:]
            assert all(p.poll() is None for p in procs), node_logs(tmp_path)[-3000:]
            time.sleep(0.05)
        if kind == "list":
            sync_redis.lpush(seed_key, *entries)
        elif kind == "set":
            sync_redis.sadd(seed_key, *entries)
        else:
            sync_redis.zadd(seed_key, {e: i for i, e in enumerate(entries)})
        expected = SITE.expected_urls(port)
        deadline = time.monotonic() + 90
        done_at = None
        while time.monotonic() < deadline:
            stats = fetch_stats(port)
            if done_at is None and stats["content_fetched"] == len(expected):
                done_at = time.monotonic()
            if all(p.poll() is not None for p in procs):
                break
            time.sleep(0.05)
        exited_at, exited_wall = time.monotonic(), time.time()
        codes = [p.poll() for p in procs]
        logs = node_logs(tmp_path)
        assert codes == [0, 0], f"exit codes {codes}\n{logs[-5000:]}"
        assert done_at is not None
        took = exited_at - done_at
        finished = min(
            datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()
            for line in logs.splitlines()
            if f"Job '{spider}' is finished" in line
        )
        after = exited_wall - finished
        print(
            f"\n{spider}/{kind}: both nodes exited {after:.2f} s after the job finished, "
            f"{took:.2f} s after its last page was fetched"
        )
        # scrapy-redis's nodes idle for ever; these close once their last requests and
        # items are done (on a quiet machine within a second; bounded loosely here)
        assert after <= 4.0, f"{after:.2f} s\n{logs[-3000:]}"
        assert logs.count("Spider closed (finished)") == 2, logs[-3000:]
        stats = fetch_stats(port)
        assert stats["never_fetched"] == [] and stats["fetched_twice"] == [], stats
        assert "crawlfleet takes over from scrapy-redis" in logs
        assert f"waiting for seeds (in {seed_key} or" in logs
        assert f"Unreadable seed b'{{\"no_url\": 1}}' in {seed_key} set aside" in logs
        assert sync_redis.lrange(seed_keys(seed_key).unreadable, 0, -1) == [b'{"no_url": 1}']
        assert sync_redis.exists(seed_key) == 0
        # items: one per page (each is a product or an article), in <spider>:items
        # and in the store
        pages = {SITE.url(n, port) for n in range(SITE.pages)}
        listed = [json.loads(raw)["url"] for raw in sync_redis.lrange(items_key, 0, -1)]
        assert sorted(listed) == sorted(pages)
        engine = sa.create_engine(f"sqlite:///{db}", poolclass=sa.NullPool)
        with engine.connect() as conn:
            stored = [r[0] for r in conn.execute(sa.text("SELECT url FROM crawlfleet_items"))]
        engine.dispose()
        assert sorted(stored) == sorted(pages)
        # nothing of scrapy-redis's own scheduler was written
        assert not sync_redis.exists(f"{spider}:requests", f"{spider}:dupefilter")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        stop_site_process(site)
        sync_redis.delete(seed_key, seed_keys(seed_key).reader, seed_keys(seed_key).unreadable)


def test_flush_on_start_under_scrapy_crawl_is_one_line(
    redis_server_url: str, key_prefix: str, tmp_path: Path
) -> None:
    """The refusal under `scrapy crawl`: one ERROR line saying what to do instead, no
    traceback, exit status 2, the job left as it was."""
    make_project(
        tmp_path / "proj",
        f"SCHEDULER = 'scrapy_redis.scheduler.Scheduler'\nSCHEDULER_FLUSH_ON_START = True\n"
        f"REDIS_URL = {redis_server_url!r}\nCRAWLFLEET_KEY_PREFIX = {key_prefix!r}\n",
    )
    (tmp_path / "proj" / "proj" / "spiders" / "redis_spiders.py").write_text(SPIDERS)

    async def other_node() -> None:
        client = make_client(redis_server_url)
        frontier = Frontier(client, JobKeys.of(key_prefix, "myspider_redis"))
        await frontier.heartbeat("other", ttl_ms=60_000, status="{}", busy=True, lease_ms=1000)
        await client.aclose()

    asyncio.run(other_node())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCRAPY_", "CRAWLFLEET_"))}
    r = subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "myspider_redis", "-s", "LOG_LEVEL=ERROR"],
        cwd=tmp_path / "proj",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr[-3000:]
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert lines[0].endswith(
        "crawlfleet: SCHEDULER_FLUSH_ON_START = True would delete job 'myspider_redis' while "
        "1 other node(s) work on it: remove the setting (the job's state persists), and to "
        "start over stop its nodes and run `crawlfleet job reset myspider_redis`"
    ), lines[0]
