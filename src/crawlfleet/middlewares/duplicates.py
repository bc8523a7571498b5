"""Duplicates dropped where the spider yields them: the ``KnownDuplicates`` spider
middleware (enabled by the add-on, next to the spider).

Most links of a real site's pages are the same navigation links on every page. Scrapy
takes each of them through the spider middlewares, the engine's ``request_scheduled``
signal and the scheduler before the seen-filter drops it: on Java's API docs, 98 of
every 100 requests a page yields. A request whose fingerprint the node's seen cache
holds (:class:`~crawlfleet.node.seencache.SeenCache`: the job's seen-filter has it) is
a duplicate however far it goes, so this middleware drops it as the spider yields it,
counted as the scheduler counts it (with the next commit).

Only where that drops what the scheduler would (decided at the first page, from the
spider middlewares as Scrapy built them and the signals' receivers then):

- the fingerprint is Scrapy's stock one (method, URL, body, ``verbatim_url``), which no
  middleware of Scrapy's own or crawlfleet's changes on the way;
- every spider middleware between this one and the engine that takes the output is
  Scrapy's own or crawlfleet's, and none of them needs the whole output (crawlfleet's
  ``Changes``, on while ``CRAWLFLEET_REVISIT`` is, judges a page by every link it
  yields): a project's own may rewrite URLs;
- nothing but Scrapy's own receives ``request_scheduled`` or ``request_dropped`` (an
  extension counting requests sees what it saw before; a receiver bound to an object
  is judged by the object's class: a project's subclass of Scrapy's offsite middleware
  is the project's).

Otherwise it passes everything on, and says why at DEBUG once. Requests that skip the
filter (``dont_filter``) and start requests always go on to the scheduler, and so does
every request while one of the node's slots is due (``GiveWay`` pauses the output for
it, further on). What differs from a vanilla crawl is in the figures only: Scrapy's
``request_depth_max`` no longer counts known duplicates, and one that Scrapy's depth
limit or offsite check would have dropped first counts as a duplicate instead. After a
reset of the job under the node, the known duplicates it held are sent to the new job,
but not those dropped here: they never passed the spider middlewares (their depth, a
campaign unit's meta, were never set).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any

from pydispatch import dispatcher
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.http import Response

from crawlfleet.parts import NodeHandle, node_of
from crawlfleet.settings.access import component_path

__all__ = ["DROPPED_STAT", "KnownDuplicates", "why_not_early"]

logger = logging.getLogger(__name__)

#: crawlfleet's spider middlewares that may sit between this one and the engine: each
#: passes a request on unchanged but for its meta (which the stock fingerprint ignores)
HARMLESS = frozenset(
    {
        "crawlfleet.middlewares.sendtime.GiveWay",
        "crawlfleet.node.campaign.UnitMeta",
    }
)
#: the signals a known duplicate no longer sends (``request_scheduled``) or would have
#: made the engine send (``request_dropped``)
SKIPPED_SIGNALS = (signals.request_scheduled, signals.request_dropped)
#: the requests dropped here (a page's at a time)
DROPPED_STAT = "crawlfleet/duplicates/dropped_early"


class KnownDuplicates:
    """A spider middleware: requests the node knows for duplicates go no further."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        #: the node, once this middleware knows whether it may drop early (None: not)
        self._node: NodeHandle | None = None
        self._decided = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> KnownDuplicates:
        return cls(crawler)

    def _dropper(self) -> NodeHandle | None:
        """The node, when this middleware drops known duplicates (decided at the first
        page: every middleware and extension is in place by then)."""
        if not self._decided:
            node = node_of(self.crawler)
            if node is None:
                return None
            self._decided = True
            why = why_not_early(self.crawler, node, _spider_middlewares(self.crawler))
            if why:
                logger.debug("Known duplicates go on to the scheduler: %s", why)
            else:
                self._node = node
        return self._node

    def process_spider_output(
        self, response: Response, result: Iterable[Any], spider: Spider | None = None
    ) -> Iterator[Any]:
        node = self._dropper()
        if node is None:
            yield from result
            return
        drop, dropped = node.drop_known, 0
        try:
            for obj in result:
                if isinstance(obj, Request) and drop(obj):
                    dropped += 1
                else:
                    yield obj
        finally:
            self._count(dropped)

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any], spider: Spider | None = None
    ) -> AsyncIterator[Any]:
        node = self._dropper()
        if node is None:
            async for obj in result:
                yield obj
            return
        drop, dropped = node.drop_known, 0
        try:
            async for obj in result:
                if isinstance(obj, Request) and drop(obj):
                    dropped += 1
                else:
                    yield obj
        finally:
            self._count(dropped)

    def _count(self, dropped: int) -> None:
        if dropped and self.crawler.stats is not None:
            self.crawler.stats.inc_value(DROPPED_STAT, dropped)


def why_not_early(crawler: Crawler, node: NodeHandle, middlewares: Sequence[Any]) -> str:
    """Why known duplicates may not be dropped where the spider yields them ("": they
    may), *middlewares* being the crawler's spider middlewares as Scrapy built them (the
    engine's side first); see the module docstring."""
    if not node.stock_fingerprint:
        return "the request fingerprinter is not Scrapy's stock one"
    here = next((i for i, mw in enumerate(middlewares) if isinstance(mw, KnownDuplicates)), None)
    if here is None:
        return "not among the spider middlewares"
    for mw in middlewares[:here]:  # those that take the output after it
        name = component_path(type(mw))
        if name in HARMLESS or name.startswith("scrapy."):
            continue
        if hasattr(mw, "process_spider_output") or hasattr(mw, "process_spider_output_async"):
            return f"spider middleware {name} takes the output after it"
    for signal in SKIPPED_SIGNALS:
        for receiver in dispatcher.liveReceivers(
            dispatcher.getAllReceivers(crawler.signals.sender, signal)
        ):
            owner = getattr(receiver, "__self__", None)  # a bound method: its object's class
            name = component_path(type(owner)) if owner is not None else _name(receiver)
            if not name.startswith("scrapy."):
                return f"{name} receives a signal it skips"
    return ""


def _spider_middlewares(crawler: Crawler) -> Sequence[Any]:
    """The crawler's spider middlewares in Scrapy's order (empty before its engine)."""
    engine = getattr(crawler, "engine", None)
    manager = getattr(getattr(engine, "scraper", None), "spidermw", None)
    return tuple(getattr(manager, "middlewares", ()))


def _name(receiver: Any) -> str:
    """The dotted path of a function (a partial or other callable has none: "?")."""
    module = getattr(receiver, "__module__", None) or "?"
    return f"{module}.{getattr(receiver, '__qualname__', '?')}"
