"""The SendTime middleware's way back: a response is held while the node says a slot
is about to come due (see Scheduler.parse_hold, tested in tests/node/test_node_parts.py),
and passes at once otherwise. The GiveWay spider middleware passes a page's output on,
pausing it as the node says (Scheduler.give_way; the crawl it keeps on time is
tests/node/test_politeness.py::test_a_pages_links_give_way_to_the_slots)."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any

from scrapy import Request, Spider
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

from crawlfleet.middlewares.sendtime import GiveWay, SendTime
from crawlfleet.parts import parts_of


class Node:
    """The part of a node the middleware asks on the way back."""

    def __init__(self, hold: float, pauses: list[float | None] | None = None) -> None:
        self.hold = hold
        self.pauses = pauses or []
        self.asked = 0
        self.sizes: list[int] = []
        self.costs: list[tuple[int, float]] = []
        self.checked_at = 0.0

    def parse_hold(self, size: int = 0) -> float:
        self.sizes.append(size)
        return self.hold

    def parsed(self, size: int, blocked: float) -> None:
        self.costs.append((size, blocked))

    def give_way(self) -> float | None:
        self.asked += 1
        return self.pauses.pop(0) if self.pauses else None


def middleware(hold: float | None) -> tuple[SendTime, Any]:
    crawler = get_crawler(Spider)
    if hold is not None:
        parts_of(crawler).node = Node(hold)  # type: ignore[assignment]
    return SendTime.from_crawler(crawler), crawler.stats


def response() -> HtmlResponse:
    return HtmlResponse("http://a.test/", body=b"<html></html>", request=Request("http://a.test/"))


def test_a_response_passes_at_once_without_a_node_or_a_slot_due() -> None:
    page = response()
    for hold in (None, 0.0):
        mw, stats = middleware(hold)
        assert mw.process_response(page.request, page) is page
        assert stats.get_value("crawlfleet/scheduler/parse_held") is None


def test_a_response_is_held_as_long_as_the_node_says() -> None:
    mw, stats = middleware(0.05)
    page = response()
    held = mw.process_response(page.request, page)
    assert inspect.isawaitable(held)

    async def wait() -> tuple[Any, float]:
        started = time.monotonic()
        got = await held
        return got, time.monotonic() - started

    got, took = asyncio.run(wait())
    assert got is page and took >= 0.045
    assert stats.get_value("crawlfleet/scheduler/parse_held") == 1
    node = parts_of(mw.crawler).node
    assert isinstance(node, Node) and node.sizes == [len(page.body)]  # asked for its size


def test_a_pages_output_goes_on_in_order_pausing_as_the_node_says() -> None:
    """Wide margins between the figures told apart (a loaded machine stalls a process
    for tens of milliseconds)."""
    crawler = get_crawler(Spider)
    page = response()
    node = Node(0.0, [None, 0.5, 0.0])

    async def output() -> Any:
        for n in range(4):
            if n == 2:  # the object the parse took long for: 0.3 s of work, with a look
                # at the slots half-way (as KnownDuplicates looks for each request it drops)
                time.sleep(0.15)
                node.checked_at = asyncio.get_running_loop().time()
                time.sleep(0.15)
            yield n

    async def collect(mw: GiveWay) -> tuple[list[Any], float]:
        started = time.monotonic()
        got = [x async for x in mw.process_spider_output(page, output())]
        return got, time.monotonic() - started

    # no node (a crawler without crawlfleet's scheduler): passed on as it comes
    assert asyncio.run(collect(GiveWay.from_crawler(crawler)))[0] == [0, 1, 2, 3]
    parts_of(crawler).node = node  # type: ignore[assignment]
    got, took = asyncio.run(collect(GiveWay.from_crawler(crawler)))
    assert got == [0, 1, 2, 3] and node.asked == 4  # asked after each object
    assert took >= 0.79  # the one pause of 0.5 s, and 0.3 s of work
    # the longest the output blocked the loop at once: from the last look at the slots,
    # the pause left out (with it: 0.8 s and more; without the look half-way: 0.3)
    [(size, blocked)] = node.costs
    assert size == len(page.body) and 0.145 <= blocked < 0.28, blocked


def test_a_connection_a_missed_slot_did_not_use_goes_back_to_the_pool_unwrapped() -> None:
    """Twisted hands a cached connection out wrapped (to retry a request once on a
    connection the server closed); one that a missed slot did not use goes back to the
    pool as the pool keeps it (putting the wrapper back raised, and the request was
    lost: seen in a crawl through a Redis Cluster's fail-overs on a loaded machine). One
    no longer idle is not kept."""
    from twisted.internet.task import Clock
    from twisted.web._newclient import HTTP11ClientProtocol
    from twisted.web.client import _RetryingHTTP11ClientProtocol

    from crawlfleet.middlewares.sendtime import _GatedPool

    pool = _GatedPool(Clock(), None)  # type: ignore[arg-type]
    idle = HTTP11ClientProtocol()
    pool._unused("key", _RetryingHTTP11ClientProtocol(idle, None))
    assert pool._connections["key"] == [idle]
    busy = HTTP11ClientProtocol()
    busy._state = "TRANSMITTING"
    pool._unused("other", busy)
    assert "other" not in pool._connections
