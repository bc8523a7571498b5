"""Duplicates dropped where the spider yields them: the ``KnownDuplicates`` spider
middleware (enabled by the add-on, next to the spider).

Most links of a real site's pages are the same navigation links on every page. Scrapy
takes each of them through the spider middlewares, the engine's ``request_scheduled``
signal and the scheduler before the seen-filter drops it: on Java's API docs, 98 of
every 100 requests a page yields. A request whose fingerprint the node's seen cache
holds (:class:`~crawlfleet.node.seencache.SeenCache`: the job's seen-filter has it) is
a duplicate however far it goes, so this middleware drops it as the spider yields it,
counted as the scheduler counts it (with the next commit).

Only where that drops exactly what the scheduler would:

- the fingerprint is Scrapy's stock one (method, URL, body, ``verbatim_url``), which no
  middleware of Scrapy's own or crawlfleet's changes on the way;
- every spider middleware between this one and the engine that takes the output is
  Scrapy's own or crawlfleet's, and none of them needs the whole output (crawlfleet's
  ``Changes``, on while ``CRAWLFLEET_REVISIT`` is, judges a page by every link it
  yields): a project's own may rewrite URLs;
- nothing but Scrapy's own receives ``request_scheduled`` or ``request_dropped``
  (an extension counting requests sees what it saw before).

Otherwise it passes everything on, and says why at DEBUG once. Requests that skip the
filter (``dont_filter``) and start requests always go on to the scheduler. One thing
differs from a vanilla crawl: Scrapy's ``request_depth_max`` counts the depth of the
requests that reach ``DepthMiddleware``, which known duplicates no longer do.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from pydispatch import dispatcher
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.http import Response
from scrapy.utils.misc import load_object

from crawlfleet.parts import NodeHandle, node_of

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
            why = why_not_early(self.crawler, node)
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


def why_not_early(crawler: Crawler, node: NodeHandle) -> str:
    """Why known duplicates may not be dropped where the spider yields them ("": they
    may); see the module docstring."""
    if not node.stock_fingerprint:
        return "the request fingerprinter is not Scrapy's stock one"
    middlewares = dict(crawler.settings.getwithbase("SPIDER_MIDDLEWARES"))
    names = {_name(path): order for path, order in middlewares.items() if order is not None}
    order = names.get(f"{__name__}.{KnownDuplicates.__name__}")
    if order is None:
        return "not among SPIDER_MIDDLEWARES"
    for path, other in middlewares.items():
        name = _name(path)
        if other is None or other >= order or name in HARMLESS or name.startswith("scrapy."):
            continue
        cls = load_object(path)
        if hasattr(cls, "process_spider_output") or hasattr(cls, "process_spider_output_async"):
            return f"spider middleware {name} takes the output after it"
    for signal in SKIPPED_SIGNALS:
        for receiver in dispatcher.liveReceivers(
            dispatcher.getAllReceivers(crawler.signals.sender, signal)
        ):
            module = getattr(receiver, "__module__", "") or ""
            if not module.startswith("scrapy."):
                return f"{getattr(receiver, '__qualname__', receiver)!r} receives a signal it skips"
    return ""


def _name(path: Any) -> str:
    """The dotted path of a component given by path or by class."""
    return path if isinstance(path, str) else f"{path.__module__}.{path.__qualname__}"
