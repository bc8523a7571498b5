"""Pages that disappear: the ``GoneMarks`` downloader middleware (enabled by the add-on
unless ``CRAWLFLEET_REVISIT`` is "off").

A tracked page found gone keeps its stored items, marked: their document gets
``gone_at`` (ISO 8601, UTC: when the page first answered 404 or 410), the rest as it
was. To know which items are the page's, it keeps, in the page's revisit state
(``keys``, :mod:`crawlfleet.revisit.state`), the keys of the items stored of its last
version: each item of a visit judged "changed" that went through every pipeline
(``item_scraped``) adds its key, as the stores make it (:mod:`crawlfleet.pipelines.key`),
as a 20-byte digest, at most :data:`~crawlfleet.revisit.state.KEYS_KEPT` of them. Only
while an item store is enabled: without one there is nothing to mark, nothing is kept.

At the visit that finds the page gone (outcome "gone", its first 404/410 in a row:
``gone`` == 1), each of those keys is marked in every item store
(:meth:`~crawlfleet.pipelines.store.StorePipeline.mark_gone`: an
:class:`~crawlfleet.pipelines.sinks.ItemMark` on the items' own path), and the response
goes on only once every mark is durable, so the page's lease is acknowledged (kept for
its next visit) only then. A mark a store gives up (the crawl stopping while the store
is down) gives the page back to the frontier, as an item not stored does: it is visited
again, and marked then. A page that comes back (2xx) is stored as a new version, whose
document has no ``gone_at`` (:mod:`crawlfleet.middlewares.changes`).

It sits just below :class:`~crawlfleet.middlewares.revisit.Revisits` (545), which sets
the visit's outcome before it sees the response. Stats: ``revisit/gone_marked`` (marks
made durable), ``revisit/gone_unmarked`` (pages given back for a mark given up).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from itemadapter import ItemAdapter
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.http import Response
from scrapy.statscollectors import StatsCollector

from crawlfleet.exceptions import ItemNotDurable
from crawlfleet.parts import NodeParts, node_of, parts_of
from crawlfleet.pipelines.key import ItemKeyer, KeyUnavailable
from crawlfleet.revisit.config import revisit_mode
from crawlfleet.revisit.state import CHANGED, GONE, KEYS_KEPT, iso, state_of
from crawlfleet.settings.access import get_dict

__all__ = ["GoneMarks"]

logger = logging.getLogger(__name__)


class GoneMarks:
    """See the module docstring. *parts*: the node's parts (its item markers are read
    when used: the store pipelines register after the middlewares are built);
    *keyer*: the keys as the stores make them; *clock*: epoch seconds."""

    def __init__(
        self,
        parts: NodeParts,
        keyer: ItemKeyer | None = None,
        *,
        crawler: Crawler | None = None,
        stats: StatsCollector | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.parts = parts
        self.keyer = keyer or ItemKeyer()
        self.crawler = crawler
        self.stats = stats
        self.clock = clock

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> GoneMarks:
        if revisit_mode(crawler.settings) == "off":
            raise NotConfigured  # the add-on leaves it out then
        marks = cls(
            parts_of(crawler),
            ItemKeyer(get_dict(crawler.settings, "CRAWLFLEET_KEY_FIELDS")),
            crawler=crawler,
            stats=crawler.stats,
        )
        crawler.signals.connect(marks.item_scraped, signal=signals.item_scraped)
        return marks

    def item_scraped(self, item: Any, response: Any, spider: Spider | None = None) -> None:
        """``item_scraped`` handler: keep the key of an item stored of a page's new
        version in the page's state."""
        request = getattr(response, "request", None)
        state = state_of(request) if isinstance(request, Request) else None
        if state is None or state.get("outcome") != CHANGED or not self.parts.item_markers:
            return
        try:
            key = bytes.fromhex(self.keyer.key(ItemAdapter(item)))
        except (KeyUnavailable, ValueError):
            return  # no key: not stored
        keys = state.get("keys")
        kept = list(keys) if isinstance(keys, list) else []
        if key not in kept and len(kept) < KEYS_KEPT:
            state["keys"] = [*kept, key]  # a new list: an older copy of the state keeps its own

    async def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Response:
        state = state_of(request)
        if state is None or state.get("outcome") != GONE or state.get("gone") != 1:
            return response
        keys = state.get("keys")
        markers = list(self.parts.item_markers)
        if not isinstance(keys, list) or not keys or not markers:
            return response
        last = state.get("last")
        gone_at = iso(last if isinstance(last, int | float) else self.clock())
        marks = [
            marker.mark_gone(key.hex(), request.url, gone_at)
            for key in keys
            if isinstance(key, bytes)
            for marker in markers
        ]
        results = await asyncio.gather(*marks, return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        self._inc("revisit/gone_marked", len(results) - len(failed))
        if failed:
            unexpected = [r for r in failed if not isinstance(r, ItemNotDurable)]
            if unexpected:
                error = unexpected[0]
                logger.error("Items of %s not marked gone: %s", request.url, error, exc_info=error)
            node = node_of(self.crawler)
            if node is not None:
                node.unstored(request)  # visited again, and marked then
            self._inc("revisit/gone_unmarked")
        return response

    def _inc(self, name: str, count: int = 1) -> None:
        if self.stats is not None and count:
            self.stats.inc_value(name, count)
