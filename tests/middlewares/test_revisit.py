"""The middlewares of continuous crawls on Scrapy's own requests and responses: the
revisit state kept up to date by a visit's answer (conditional headers out; 304 ends
the request, 404/410 gone, 2xx fetched with its validators and caching hint), and the
spider middleware judging what a callback gave (unchanged: items dropped; changed:
stamped, a new version)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import scrapy
from scrapy import Request
from scrapy.http import HtmlResponse, Response

from crawlfleet.meta import REVISIT_META
from crawlfleet.middlewares.changes import Changes
from crawlfleet.middlewares.revisit import NotModified, Revisits
from crawlfleet.revisit.config import revisit_policy
from crawlfleet.revisit.state import stored
from crawlfleet.settings.config import settings_with_defaults

NOW = 1_800_000_000.0


def middleware(**values: Any) -> Revisits:
    settings = settings_with_defaults(
        {
            "CRAWLFLEET_REVISIT": "fixed",
            "CRAWLFLEET_REVISIT_RULES": [{"pattern": "/once", "policy": "off"}],
            **values,
        }
    )
    return Revisits(revisit_policy(settings), clock=lambda: NOW)


def answer(request: Request, status: int = 200, **headers: str) -> Response:
    return HtmlResponse(
        request.url, status=status, body=b"<html></html>", headers=headers, request=request
    )


def test_a_tracked_page_gets_its_state_and_conditional_headers() -> None:
    mw = middleware()
    first = Request("http://a.test/p")
    mw.process_request(first)
    assert first.meta[REVISIT_META] == {"outcome": "failed", "url": "http://a.test/p"}
    assert b"If-None-Match" not in first.headers
    response = answer(first, ETag='"v1"', **{"Last-Modified": "Mon, 02 Feb 2026 10:00:00 GMT"})
    assert mw.process_response(first, response) is response
    state = first.meta[REVISIT_META]
    assert state["outcome"] == "fetched" and state["last"] == NOW
    assert state["etag"] == '"v1"' and state["lm"] == "Mon, 02 Feb 2026 10:00:00 GMT"

    # the next visit (as the frontier keeps it) asks only for a change
    again = Request("http://a.test/p", meta={REVISIT_META: stored(state)})
    mw.process_request(again)
    assert again.headers[b"If-None-Match"] == b'"v1"'
    assert again.headers[b"If-Modified-Since"] == b"Mon, 02 Feb 2026 10:00:00 GMT"
    with pytest.raises(NotModified):
        mw.process_response(again, answer(again, 304, ETag='"v1"'))
    assert again.meta[REVISIT_META]["outcome"] == "not_modified"
    assert again.meta[REVISIT_META]["etag"] == '"v1"'  # a 304 keeps the validators

    # a retry of the same request: the headers follow the state, which lost its ETag
    retry = again.copy()
    retry.meta[REVISIT_META] = {"lm": "Mon, 02 Feb 2026 10:00:00 GMT", "cond": 1}
    mw.process_request(retry)
    assert b"If-None-Match" not in retry.headers and b"If-Modified-Since" in retry.headers


def test_conditional_requests_can_be_turned_off_and_untracked_pages_pass() -> None:
    mw = middleware(CRAWLFLEET_REVISIT_CONDITIONAL=False)
    request = Request("http://a.test/p", meta={REVISIT_META: {"etag": '"v1"'}})
    mw.process_request(request)
    assert b"If-None-Match" not in request.headers
    # a 304 the node did not ask for is not ours to end (the spider asked for it)
    response = answer(request, 304)
    assert mw.process_response(request, response) is response
    for url in ("http://a.test/once", "http://a.test/robots.txt"):
        other = Request(url, meta={"dont_obey_robotstxt": True})
        mw.process_request(other)
        assert REVISIT_META not in other.meta
        assert mw.process_response(other, answer(other)) is not None


def test_gone_failed_and_forgotten_validators() -> None:
    mw = middleware()
    request = Request("http://a.test/p", meta={REVISIT_META: {"etag": '"v1"', "gone": 1}})
    mw.process_request(request)
    mw.process_response(request, answer(request, 410))
    assert request.meta[REVISIT_META]["outcome"] == "gone"
    assert request.meta[REVISIT_META]["gone"] == 2
    mw.process_request(request)
    mw.process_response(request, answer(request, 500))
    assert request.meta[REVISIT_META]["outcome"] == "failed"
    mw.process_request(request)
    mw.process_exception(request, TimeoutError())
    assert request.meta[REVISIT_META]["outcome"] == "failed"
    mw.process_request(request)
    mw.process_response(request, answer(request, 200, **{"Cache-Control": "max-age=600"}))
    state = request.meta[REVISIT_META]
    assert state["outcome"] == "fetched" and "gone" not in state  # the streak ends
    assert "etag" not in state  # the page no longer sends one: forgotten
    assert state["hint"] == 600


# -- the spider middleware ------------------------------------------------------------


@dataclasses.dataclass
class Declared:
    title: str
    version: int | None = None


class Product(scrapy.Item):
    title = scrapy.Field()


def page(state: dict[str, Any] | None) -> Response:
    meta = {REVISIT_META: state} if state is not None else {}
    request = Request("http://a.test/p", meta=meta)
    return answer(request)


def judge(changes: Changes, response: Response, out: list[Any]) -> list[Any]:
    return list(changes.process_spider_output(response, iter(out)))


def test_a_page_changes_only_when_what_is_extracted_does() -> None:
    clock = iter([NOW, NOW + 10, NOW + 20])
    changes = Changes(ignored={"seen"}, clock=lambda: next(clock))
    link = Request("http://a.test/q")
    state: dict[str, Any] = {"outcome": "fetched"}
    item = {"title": "T", "seen": "12:00"}
    got = judge(changes, page(state), [item, link, Declared("T"), Product(title="T")])
    assert state["outcome"] == "changed" and state["version"] == 1
    assert state["first"] == state["changed"] == NOW
    assert got[0] == {
        "title": "T",
        "seen": "12:00",
        "first_seen": "2027-01-15T08:00:00+00:00",
        "changed_at": "2027-01-15T08:00:00+00:00",
        "version": 1,
    }
    assert got[1] is link and got[2].version == 1  # items that declare the field get it
    assert dict(got[3]) == {"title": "T"}  # an Item without the fields: as it was

    # the next visit: only an ignored field moved, the items are dropped, links go on
    state = {**stored(state), "outcome": "fetched"}
    got = judge(changes, page(state), [{"title": "T", "seen": "12:05"}, link, Declared("T"),
                                       Product(title="T")])  # fmt: skip
    assert got == [link] and state["outcome"] == "unchanged" and state["version"] == 1

    state = {**stored(state), "outcome": "fetched"}
    got = judge(changes, page(state), [{"title": "T2", "seen": "12:05"}])
    assert state["outcome"] == "changed" and state["version"] == 2
    assert got[0]["version"] == 2 and got[0]["first_seen"] == "2027-01-15T08:00:00+00:00"
    assert got[0]["changed_at"] == "2027-01-15T08:00:10+00:00"


def test_a_listing_changes_with_its_links_and_other_pages_pass_untouched() -> None:
    changes = Changes(clock=lambda: NOW)
    state: dict[str, Any] = {"outcome": "fetched"}
    links = [Request("http://a.test/1"), Request("http://a.test/2")]
    assert judge(changes, page(state), links) == links
    state = {**stored(state), "outcome": "fetched"}
    judge(changes, page(state), links[::-1])
    assert state["outcome"] == "unchanged"
    state = {**stored(state), "outcome": "fetched"}
    judge(changes, page(state), [*links, Request("http://a.test/3")])
    assert state["outcome"] == "changed" and state["version"] == 2
    # not tracked, or not fetched with a 2xx: nothing judged
    item = {"title": "T"}
    assert judge(changes, page(None), [item]) == [item] and "version" not in item
    failed = {"outcome": "failed"}
    assert judge(changes, page(failed), [item]) == [item] and failed == {"outcome": "failed"}


def test_the_async_output_of_a_callback_is_judged_and_a_failure_passes_what_it_gave() -> None:
    changes = Changes(clock=lambda: NOW)

    async def output(fail: bool) -> AsyncIterator[Any]:
        yield {"title": "T"}
        if fail:
            raise ValueError("broken page")

    async def collect(state: dict[str, Any], fail: bool) -> list[Any]:
        got = []
        async for x in changes.process_spider_output_async(page(state), output(fail)):
            got.append(x)
        return got

    state: dict[str, Any] = {"outcome": "fetched"}
    assert asyncio.run(collect(state, False))[0]["version"] == 1
    broken = {**stored(state), "outcome": "fetched"}
    with pytest.raises(ValueError, match="broken page"):
        asyncio.run(collect(broken, True))
    assert broken["outcome"] == "fetched"  # not judged: the visit counts as failed

    def sync_output() -> Iterator[Any]:
        yield {"title": "T"}
        raise ValueError("broken page")

    given: list[Any] = []
    with pytest.raises(ValueError, match="broken page"):
        given.extend(changes.process_spider_output(page(broken), sync_output()))
    assert given == [{"title": "T"}] and broken["outcome"] == "fetched"


# -- in a real crawl --------------------------------------------------------------------

#: A plain Scrapy crawl (Scrapy's scheduler) with both middlewares where the add-on puts
#: them; its spider visits each page three times, passing the revisit state on as the
#: frontier keeps it, and writes what each visit found.
CRAWL = """
import json, sys
import scrapy
from scrapy.crawler import CrawlerProcess
from crawlfleet.meta import REVISIT_META
base, out = sys.argv[1], sys.argv[2]
seen = []

class Thrice(scrapy.Spider):
    name = "thrice"

    async def start(self):
        for path in ("etag", "stamp", "gone"):
            yield scrapy.Request(base + path, cb_kwargs={"visit": 1}, errback=self.failed,
                                 dont_filter=True)

    def parse(self, response, visit):
        yield {"url": response.url, "title": response.css("h1::text").get(),
               "stamp": response.css("time::text").get()}
        yield from self.again(response.request, visit)

    def again(self, request, visit):
        if visit < 3:  # the state itself: it is judged once the callback is done
            yield request.replace(meta={REVISIT_META: request.meta[REVISIT_META]},
                                  cb_kwargs={"visit": visit + 1})

    def failed(self, failure):
        request = failure.request
        seen.append([request.url, request.meta[REVISIT_META]["outcome"]])
        yield from self.again(request, request.cb_kwargs["visit"])

    def closed(self, reason):
        stats = self.crawler.stats.get_stats()
        json.dump({"outcomes": seen, "errors": stats.get("log_count/ERROR", 0)}, open(out, "w"))

process = CrawlerProcess({
    "CRAWLFLEET_REVISIT": "fixed",
    "CRAWLFLEET_REVISIT_IGNORE_FIELDS": ["stamp"],
    "DOWNLOADER_MIDDLEWARES": {"crawlfleet.middlewares.revisit.Revisits": 545},
    "SPIDER_MIDDLEWARES": {"crawlfleet.middlewares.changes.Changes": 880},
    "FEEDS": {out + ".items": {"format": "jsonlines"}},
    "LOG_LEVEL": "INFO",
    "RETRY_ENABLED": False,
})
process.crawl(Thrice)
process.start()
"""


@pytest.mark.slow
def test_a_real_crawl_asks_for_changes_and_keeps_only_new_versions(tmp_path: Any) -> None:
    import json
    import subprocess
    import sys
    from pathlib import Path

    from tests.support.loopback import LoopbackSite

    root = Path(__file__).resolve().parents[2]
    visits: dict[str, int] = {}

    def site(path: str, headers: dict[str, str]) -> tuple[Any, ...]:
        visits[path] = visits.get(path, 0) + 1
        n = visits[path]
        if path == "/etag":  # the same page each time, with an ETag
            if headers.get("If-None-Match") == '"e1"':
                return 304, b"", {"ETag": '"e1"'}
            return 200, b"<h1>Same</h1>", {"ETag": '"e1"'}
        if path == "/stamp":  # only its timestamp moves, then its title on the third visit
            title = "Old" if n < 3 else "New"
            return 200, f"<h1>{title}</h1><time>12:0{n}</time>".encode()
        return (200, b"<h1>Here</h1>") if n == 1 else (404, b"gone")

    out = tmp_path / "out.json"
    script = tmp_path / "crawl.py"  # a file: Scrapy reads its callbacks' source
    script.write_text(CRAWL)
    with LoopbackSite(site) as loop:
        done = subprocess.run(
            [sys.executable, str(script), loop.url, str(out)],
            cwd=tmp_path,
            env={"PYTHONPATH": f"{root / 'src'}:{root}", "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    items = [json.loads(line) for line in Path(f"{out}.items").read_text().splitlines()]
    by_path: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        by_path.setdefault(item["url"].rsplit("/", 1)[1], []).append(item)
    # /etag: one version, then two 304s (each asked with its ETag), no parse, no error
    assert [i["version"] for i in by_path["etag"]] == [1]
    assert visits["/etag"] == 3
    expected = [[loop.url + "etag", "not_modified"]] * 2 + [[loop.url + "gone", "gone"]] * 2
    assert sorted(result["outcomes"]) == sorted(expected)
    # /stamp: the timestamp alone is no new version; the new title is version 2
    assert [(i["title"], i["version"]) for i in by_path["stamp"]] == [("Old", 1), ("New", 2)]
    assert by_path["stamp"][0]["first_seen"] == by_path["stamp"][1]["first_seen"]
    assert len(by_path["gone"]) == 1
    assert result["errors"] == 0, done.stderr[-3000:]
