"""A rate-limited request goes out at its slot, or not at all: the ``SendTime``
downloader middleware (enabled by the add-on, last before the downloader).

The scheduler hands the engine a slotted request at its send time (see
:mod:`crawlfleet.node.slots`), but what lies between the engine and the wire can hold it
back: Scrapy's RobotsTxtMiddleware reading a host's robots.txt first, or the download
slot of its host, full under ``CONCURRENT_REQUESTS_PER_DOMAIN`` (1 in a project made by
``scrapy startproject``) while an earlier request to a slow site is still in flight.
Sent that late, it could share a window with the next slots of other nodes. So, as the
last middleware before the downloader, this one checks each slotted request once more:
past the time by which it had to get here (its slot plus ``SENT_SHARE`` of the slot's
margin, :mod:`crawlfleet.frontier.limits`; the rest covers the wire), or about to wait
in a full download slot, it is not sent but given back (a copy that skips the
seen-filter goes to the frontier for a new slot, committed with the original's
acknowledgement, as a retry is), and counted in ``crawlfleet/scheduler/late``.
Robots.txt is read ahead when a slotted request is leased
(:func:`crawlfleet.node.engine.engine_hooks`), so it seldom costs a slot.

Then, at the wire: the add-on puts :class:`SendTimeHandler` (Scrapy's HTTP/1.1 download
handler, its connection pool gated) in the place of Scrapy's for http and https, unless
the project named its own (scrapy-playwright's, say). A slotted request then goes to the
engine a little before its slot (the longest a new connection lately took to open: see
:data:`crawlfleet.node.slots.WIRE_EARLY_MIN`), passes the middlewares, gets its
connection (a new one opens meanwhile), and waits there: its bytes leave when its slot
comes, not a connection's opening after it (a node's first request to a site came 35
ms late, and the next slot on time: 3 requests in 0.995 s at 2/1s). Found past its
send-by time with its connection in hand (the node had no core for that long), it is
not sent: its connection goes back to the pool and the request comes back here, given
back as above.

On their way back, responses are held while the node's slots would come due during
their parse (:meth:`crawlfleet.node.scheduler.Scheduler.parse_hold`): parsing a large
page blocks the event loop for tens of milliseconds (a page of megabytes, for most of a
second), and a slot that comes due meanwhile is missed; held until just after the slots
it would overlap, the parse waits and the slots are used. How long a parse blocks the
loop, the node learns from its pages (the longest block of each page's output, per byte:
measured by ``GiveWay``, below). Counted in ``crawlfleet/scheduler/parse_held``.

Then a parsed page's output (its links run one by one through the spider middlewares
and the scheduler: tens of milliseconds for hundreds of links) gives way to the slots:
the ``GiveWay`` spider middleware (enabled by the add-on, last before the engine) pauses
it until just after a slot due within ``GIVE_WAY_SECONDS``, and lets the event loop
take a turn after that long of work while a slot waits (see
:meth:`crawlfleet.node.scheduler.Scheduler.give_way`). Without slots it only passes the
output on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine, Hashable
from contextvars import ContextVar
from typing import Any

from scrapy import Request, Spider
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.crawler import Crawler
from scrapy.http import Response
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.web._newclient import HTTP11ClientProtocol
from twisted.web.client import HTTPConnectionPool

from crawlfleet.parts import SendWindow, node_of

__all__ = ["GiveWay", "SendTime", "SendTimeHandler", "SlotMissed"]

logger = logging.getLogger(__name__)


class SendTime:
    """A downloader middleware: a slotted request that cannot go out on time goes back."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SendTime:
        return cls(crawler)

    def process_request(self, request: Request, spider: Spider | None = None) -> Request | None:
        node = node_of(self.crawler)
        if node is None:
            return None
        send_by = node.send_by(request)
        if send_by is None:
            return None  # not rate-limited (or a robots probe): any time is its time
        late = asyncio.get_event_loop().time() > send_by
        if not late and node.starts_now(request):
            return None
        if late:
            return self._given_back(request, "way", "missed its slot")
        return self._given_back(request, "download_slot", "would wait in a full download slot")

    def process_exception(
        self, request: Request, exception: Exception, spider: Spider | None = None
    ) -> Request | None:
        if isinstance(exception, SlotMissed):
            return self._given_back(request, "wire", "missed its slot at the wire")
        return None

    def _given_back(self, request: Request, cause: str, why: str) -> Request:
        """A copy of *request* for the frontier, to get a new slot; *cause* as
        :mod:`crawlfleet.node.lateness` counts it."""
        if self.stats is not None:
            self.stats.inc_value("crawlfleet/scheduler/late")
            self.stats.inc_value(f"crawlfleet/scheduler/late/{cause}")
        logger.debug("%s %s: given back for a new slot", request, why)
        meta = {k: v for k, v in request.meta.items() if k != "is_start_request"}
        return request.replace(dont_filter=True, meta=meta)

    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Response | Coroutine[Any, Any, Response]:
        node = node_of(self.crawler)
        hold = node.parse_hold(len(response.body)) if node is not None else 0.0
        if hold <= 0:
            return response
        return self._held(response, hold)

    async def _held(self, response: Response, hold: float) -> Response:
        if self.stats is not None:
            self.stats.inc_value("crawlfleet/scheduler/parse_held")
        await asyncio.sleep(hold)
        return response


class GiveWay:
    """A spider middleware: a page's output pauses for this node's slots (see the
    module docstring). Asynchronous only, so that it can wait; the add-on places it
    last before the engine (order 5), so that Scrapy hands it every output as an
    asynchronous one, and nothing after it needs the output back in a synchronous
    form."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> GiveWay:
        return cls(crawler)

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any], spider: Spider | None = None
    ) -> AsyncIterator[Any]:
        node = node_of(self.crawler)
        if node is None:
            async for obj in result:
                yield obj
            return
        loop = asyncio.get_event_loop()
        longest = 0.0  # the longest the output blocked the loop at once
        asked = loop.time()
        async for obj in result:
            # since the last look at the slots (here, or by KnownDuplicates for each
            # request it dropped on the way)
            longest = max(longest, loop.time() - max(asked, node.checked_at))
            yield obj
            pause = node.give_way()
            if pause is not None:
                await asyncio.sleep(pause)
            asked = loop.time()
        node.parsed(len(response.body), longest)


class SlotMissed(Exception):
    """A slotted request found its connection past its send-by time: not sent."""


#: the send window of the request whose connection is asked for (set by
#: SendTimeHandler around Scrapy's download, read by the pool as it is asked)
_WINDOW: ContextVar[SendWindow | None] = ContextVar("crawlfleet_send_window", default=None)


class _GatedPool(HTTPConnectionPool):
    """Scrapy's connection pool, whose connections for a slotted request are handed
    over at its slot: not before, and not after its send-by time (then it is put back
    and the request fails with :class:`SlotMissed`). *handler* hears how long each new
    connection took to open, and of each connection held for its slot."""

    def __init__(self, reactor: Any, handler: SendTimeHandler) -> None:
        super().__init__(reactor, persistent=True)  # type: ignore[no-untyped-call]
        self._handler = handler

    def getConnection(
        self, key: Hashable, endpoint: IStreamClientEndpoint
    ) -> Deferred[HTTP11ClientProtocol]:
        window = _WINDOW.get()
        fresh = not self._connections.get(key)
        asked = asyncio.get_event_loop().time()
        got: Deferred[HTTP11ClientProtocol] = super().getConnection(key, endpoint)
        if window is None:
            return got
        if fresh:
            got.addCallback(self._measured, asked)
        return got.addCallback(self._at_slot, key, window)

    def _measured(self, connection: HTTP11ClientProtocol, asked: float) -> HTTP11ClientProtocol:
        self._handler.opened(asyncio.get_event_loop().time() - asked)
        return connection

    def _at_slot(
        self, connection: HTTP11ClientProtocol, key: Hashable, window: SendWindow
    ) -> HTTP11ClientProtocol | Deferred[HTTP11ClientProtocol]:
        loop = asyncio.get_event_loop()
        now = loop.time()
        if now > window.by:
            self._unused(key, connection)
            raise SlotMissed(f"{(now - window.by) * 1000:.1f} ms past its send-by time")
        if now >= window.at:
            return connection
        self._handler.held()

        def cancel(_: Deferred[HTTP11ClientProtocol]) -> None:
            # the download was cancelled meanwhile (its timeout, the crawl's close)
            timer.cancel()
            self._unused(key, connection)

        waited: Deferred[HTTP11ClientProtocol] = Deferred(cancel)
        timer = loop.call_at(window.at, waited.callback, connection)
        return waited.addCallback(self._at_slot, key, window)  # the timer may fire late

    def _unused(self, key: Hashable, connection: Any) -> None:
        """*connection* was not used: back to the pool for the next request if it is
        still open and idle, else closed. (A cached one comes wrapped to retry a
        request once on a connection the server closed: the pool keeps what it wraps.)"""
        protocol = getattr(connection, "_clientProtocol", connection)
        if getattr(protocol, "state", None) == "QUIESCENT":
            self._putConnection(key, protocol)  # type: ignore[no-untyped-call]
        elif protocol.transport is not None:
            protocol.transport.loseConnection()


class SendTimeHandler(HTTP11DownloadHandler):
    """Scrapy's HTTP/1.1 download handler whose slotted requests leave at their slots
    (see the module docstring); the add-on enables it for http and https."""

    lazy = False

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        from twisted.internet import reactor

        pool = _GatedPool(reactor, self)
        pool.maxPersistentPerHost = self._pool.maxPersistentPerHost
        pool._factory = self._pool._factory  # Scrapy's lenient parser
        self._pool = pool

    def opened(self, seconds: float) -> None:
        """A new connection for a slotted request took *seconds* to open."""
        node = node_of(self._crawler)
        if node is not None:
            node.connected(seconds)

    def held(self) -> None:
        """A slotted request's connection is held until its slot."""
        if self._crawler.stats is not None:
            self._crawler.stats.inc_value("crawlfleet/scheduler/wire_held")

    async def download_request(self, request: Request) -> Response:
        node = node_of(self._crawler)
        window = node.send_window(request) if node is not None else None
        if window is None:
            return await super().download_request(request)
        # the pool is asked for a connection before the download's first pause
        token = _WINDOW.set(window)
        try:
            return await super().download_request(request)
        finally:
            _WINDOW.reset(token)
