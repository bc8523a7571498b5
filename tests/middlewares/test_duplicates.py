"""The KnownDuplicates spider middleware: a request the node knows for a duplicate is
dropped where the spider yields it, only where that drops what the scheduler would."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from scrapy import Request, Spider, signals
from scrapy.core.spidermw import SpiderMiddlewareManager
from scrapy.downloadermiddlewares.offsite import OffsiteMiddleware
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

from crawlfleet.addon import KNOWN_DUPLICATES
from crawlfleet.middlewares.duplicates import DROPPED_STAT, KnownDuplicates, why_not_early
from crawlfleet.node.launcher import start_node, wait_all
from crawlfleet.parts import parts_of
from tests.support.loopback import LoopbackSite

CHANGES = "crawlfleet.middlewares.changes.Changes"


class Node:
    """The part of a node the middleware asks: which requests it knows."""

    def __init__(self, known: set[str], *, stock: bool = True) -> None:
        self.known = known
        self.stock_fingerprint = stock
        self.asked: list[str] = []

    def drop_known(self, request: Request) -> bool:
        self.asked.append(request.url)
        return request.url in self.known


class Rewriting:
    """A project's spider middleware that takes the output (it may change URLs)."""

    async def process_spider_output(self, response: Any, result: Any, spider: Any = None) -> Any:
        async for obj in result:
            yield obj


class InputOnly:
    """A project's spider middleware that only looks at responses."""

    def process_spider_input(self, response: Any, spider: Any = None) -> None:
        return None


def received(**kwargs: Any) -> None:
    """A project's receiver of a signal."""


def crawler_with(middlewares: dict[Any, int | None], node: Node | None, **settings: Any) -> Any:
    """A crawler with *middlewares* and KnownDuplicates as the add-on places it (after
    the project's own in the dict, as the add-on adds it), its spider middlewares built
    as Scrapy's engine builds them; *node* as its node."""
    project = dict(middlewares)
    project.setdefault(KNOWN_DUPLICATES, 990)
    crawler = get_crawler(Spider, {"SPIDER_MIDDLEWARES": project, **settings})
    crawler.engine = SimpleNamespace(
        scraper=SimpleNamespace(spidermw=SpiderMiddlewareManager.from_crawler(crawler))
    )
    if node is not None:
        parts_of(crawler).node = node  # type: ignore[assignment]
    return crawler


def page() -> HtmlResponse:
    return HtmlResponse("http://a.test/", body=b"<html></html>", request=Request("http://a.test/"))


OUTPUT = [
    Request("http://a.test/nav"),
    {"title": "an item"},
    Request("http://a.test/new"),
    Request("http://a.test/nav2"),
]
KNOWN = {"http://a.test/nav", "http://a.test/nav2"}


def names(objs: list[Any]) -> list[Any]:
    return [o.url if isinstance(o, Request) else o for o in objs]


async def _output() -> Any:
    for obj in OUTPUT:
        yield obj


async def _collect(mw: KnownDuplicates) -> list[Any]:
    return [x async for x in mw.process_spider_output_async(page(), _output())]


def test_known_duplicates_go_no_further_the_rest_in_order() -> None:
    for run in ("sync", "async"):
        crawler = crawler_with({}, Node(KNOWN))
        mw = KnownDuplicates.from_crawler(crawler)
        if run == "sync":
            got = list(mw.process_spider_output(page(), iter(OUTPUT)))
        else:
            got = asyncio.run(_collect(mw))
        assert names(got) == [{"title": "an item"}, "http://a.test/new"], run
        assert crawler.stats.get_value(DROPPED_STAT) == 2, run


def test_without_a_node_or_where_it_may_not_everything_goes_on() -> None:
    # a crawler without crawlfleet's scheduler
    mw = KnownDuplicates.from_crawler(crawler_with({}, None))
    assert names(list(mw.process_spider_output(page(), iter(OUTPUT)))) == names(OUTPUT)
    # a project's middleware after it: the node is not even asked
    node = Node(KNOWN)
    crawler = crawler_with({f"{__name__}.Rewriting": 543}, node)
    mw = KnownDuplicates.from_crawler(crawler)
    assert names(list(mw.process_spider_output(page(), iter(OUTPUT)))) == names(OUTPUT)
    assert node.asked == [] and crawler.stats.get_value(DROPPED_STAT) is None


def why(crawler: Any, node: Node) -> str:
    """why_not_early over the spider middlewares Scrapy built for *crawler*."""
    built = crawler.engine.scraper.spidermw.middlewares
    return why_not_early(crawler, node, built)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("middlewares", "stock", "reason"),
    [
        ({}, True, ""),
        ({}, False, "not Scrapy's stock one"),
        ({f"{__name__}.Rewriting": 543}, True, f"spider middleware {__name__}.Rewriting"),
        ({Rewriting: 543}, True, f"spider middleware {__name__}.Rewriting"),  # by class
        # the same order: the project's own comes first, nearer the engine
        ({f"{__name__}.Rewriting": 990}, True, f"spider middleware {__name__}.Rewriting"),
        ({f"{__name__}.Rewriting": None}, True, ""),  # switched off
        ({f"{__name__}.InputOnly": 543}, True, ""),  # not the output's
        ({f"{__name__}.Rewriting": 995}, True, ""),  # before it, nearer the spider
        ({"crawlfleet.middlewares.sendtime.GiveWay": 5}, True, ""),
        ({KNOWN_DUPLICATES: None}, True, "not among the spider middlewares"),
    ],
)
def test_where_known_duplicates_may_be_dropped_early(
    middlewares: dict[Any, int | None], stock: bool, reason: str
) -> None:
    got = why(crawler_with(middlewares, None), Node(set(), stock=stock))
    assert (got == "") if not reason else (reason in got), got


def test_not_while_continuous_crawling_judges_pages_by_their_links() -> None:
    # crawlfleet's Changes (on with CRAWLFLEET_REVISIT) fingerprints every link a page yields
    assert why(crawler_with({CHANGES: 880}, None), Node(set())) == ""  # off: not built
    crawler = crawler_with({CHANGES: 880}, None, CRAWLFLEET_REVISIT="fixed")
    assert f"spider middleware {CHANGES} takes the output" in why(crawler, Node(set()))


class ProjectOffsite(OffsiteMiddleware):
    """A project's own offsite rules: Scrapy's receiver, overridden."""

    def should_follow(self, request: Request, spider: Spider) -> bool:
        return True


def test_not_while_a_project_receives_a_signal_it_would_skip() -> None:
    for signal in (signals.request_scheduled, signals.request_dropped):
        crawler = crawler_with({}, None)
        assert why(crawler, Node(set())) == ""
        crawler.signals.connect(received, signal=signal)
        assert f"{__name__}.received receives a signal" in why(crawler, Node(set()))
    # Scrapy's own receiver, bound to a project's subclass: the project's
    crawler = crawler_with({}, None)
    project = ProjectOffsite(crawler)
    crawler.signals.connect(project.request_scheduled, signal=signals.request_scheduled)
    assert f"{__name__}.ProjectOffsite receives a signal" in why(crawler, Node(set()))


def _pages(pattern: str) -> Any:
    def answer(path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        return (200, b"<html></html>") if re.fullmatch(pattern, path) else (404, b"")

    return answer


def _crawl(
    redis_url: str, env: dict[str, str], tmp: Path, spider: str, answer: Any, args: dict[str, str]
) -> tuple[dict[str, int], dict[str, Any]]:
    """Hits by path, and the node's stats, of a crawl by one node of *spider*."""
    with LoopbackSite(answer) as site:
        stats_file = tmp / f"stats-{spider.rsplit(':', 1)[1]}.json"
        proc = start_node(
            spider,
            job=f"dupes-{spider.rsplit(':', 1)[1]}",
            redis_url=redis_url,
            log=tmp / "node.log",
            spider_args={"base": site.url.rstrip("/"), **args},
            settings={
                **env,
                "CRAWLFLEET_ITEM_STAGES": "",
                "CRAWLFLEET_STATS_FILE": str(stats_file),
                "LOG_LEVEL": "DEBUG",
            },
        )
        assert wait_all([proc], 120) == [0], (tmp / "node.log").read_text()[-3000:]
        hits = dict(site.hits)
    return hits, json.loads(stats_file.read_text())


def test_a_node_drops_its_known_duplicates_early_and_crawls_each_page_once(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    hits, stats = _crawl(
        redis_server_url,
        node_env,
        tmp_path,
        "tests.support.node_spiders:ManyLinksSpider",
        _pages(r"/p/\d+"),
        {"pages": "12", "links": "5", "per_link": "0"},
    )
    assert hits == {f"/p/{n}": 1 for n in range(12)}, hits
    # 12 pages x 60 links, 11 new: all but a few that were not known yet
    print(f"\n{stats.get(DROPPED_STAT)} of 720 links dropped where the spider yields them")
    assert stats.get(DROPPED_STAT, 0) >= 600
    assert stats["dupefilter/filtered"] == 720 - 11


def test_a_project_middleware_that_rewrites_urls_keeps_every_request_to_the_scheduler(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    """Dropped before the project's middleware turned ``/p/1`` into ``/p/1?lang=de``,
    the German pages would be lost: ``/p/1`` is known by then."""
    hits, stats = _crawl(
        redis_server_url,
        node_env,
        tmp_path,
        "tests.support.node_spiders:LanguagesSpider",
        _pages(r"/p/\d+(\?lang=de)?"),
        {"pages": "6"},
    )
    expected = {f"/p/{n}": 1 for n in range(6)} | {f"/p/{n}?lang=de": 1 for n in range(6)}
    assert hits == expected, hits
    assert DROPPED_STAT not in stats
    log = (tmp_path / "node.log").read_text()
    assert "Known duplicates go on to the scheduler: spider middleware" in log
