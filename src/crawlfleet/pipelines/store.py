"""Store stage: hand items to an :class:`~crawlfleet.pipelines.sinks.ItemSink`.

One :class:`StorePipeline` per store; several stores at once are several pipelines in
``ITEM_PIPELINES`` (e.g. SQL and, later, MongoDB or a Redis stream), each with its own
buffer, so a slow store holds back only when its own buffer is full.

The record of an item: its key (``_key`` as set by the key stage; computed here the same
way when the item has none, e.g. a Scrapy Item without a ``_key`` field), the job
(``CRAWLFLEET_JOB``, else the spider name), its type, its ``url`` and its public fields
as the document. The item itself is returned unchanged, so later pipelines see it.

``process_item`` returns once the item is durable in the store (committed, or in the
Redis stream): the scheduler acknowledges a request only after its items went through
every pipeline, so no acknowledged page has an item that a crash could lose. While the
store is down, items wait in the sink's buffer; once ``CRAWLFLEET_ITEMS_PENDING_MAX``
wait, the node takes no more work until they are written
(:mod:`crawlfleet.node.backlog`), so a crash during an outage fetches at most so many
pages again (plus those in flight); the sink's full buffer is the last back-pressure.
Once a stop was asked for (Ctrl-C, a control command) while the store is down, the
waiting items are given up with
:class:`~crawlfleet.exceptions.ItemNotDurable` (a DropItem): the scheduler then puts
their pages back in the frontier instead of acknowledging them.

A store pipeline also marks the items of pages found gone (:meth:`StorePipeline.mark_gone`,
asked by :mod:`crawlfleet.pipelines.gone`): an
:class:`~crawlfleet.pipelines.sinks.ItemMark` saved like an item, with the same
durability.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Any, Self

from itemadapter import ItemAdapter
from scrapy import Spider
from scrapy.crawler import Crawler
from scrapy.exceptions import DropItem

from crawlfleet.node.engine import is_stopping
from crawlfleet.parts import parts_of
from crawlfleet.pipelines._util import item_type, item_url
from crawlfleet.pipelines.buffered import BufferedSink
from crawlfleet.pipelines.key import ItemKeyer, KeyUnavailable
from crawlfleet.pipelines.sinks import ItemMark, ItemSink, StoredItem, to_document
from crawlfleet.settings.access import get_dict, get_str

__all__ = ["StorePipeline"]

logger = logging.getLogger(__name__)


def _published_stores(crawler: Crawler) -> list[dict[str, str]]:
    """The identities of the crawler's item stores (created on first use, with the
    status provider that publishes them as ``item_stores``): the manager compares them
    with the stores it reads items from."""
    parts = parts_of(crawler)
    published = parts.store_identities
    if published is None:
        published = parts.store_identities = []
        stores = published
        parts.status_providers.append(lambda: {"item_stores": list(stores)})
    return published


class StorePipeline(ABC):
    """Item pipeline writing every item to *sink* (see the module docstring).

    *job* names the job in stored records; empty: the spider's name at open.
    *keyer* computes keys of items that reach the store without a final ``_key``.
    """

    def __init__(
        self,
        sink: ItemSink,
        *,
        job: str = "",
        keyer: ItemKeyer | None = None,
    ) -> None:
        self.sink = sink
        self.job = job
        self.keyer = keyer or ItemKeyer()
        self.crawler: Crawler | None = None
        self._was_crawling = False

    @classmethod
    def _from_crawler_with_sink(cls, crawler: Crawler, sink: ItemSink) -> Self:
        """Build around *sink* with the job and key settings of *crawler*."""
        pipeline = cls(
            sink,
            job=get_str(crawler.settings, "CRAWLFLEET_JOB").strip(),
            keyer=ItemKeyer(get_dict(crawler.settings, "CRAWLFLEET_KEY_FIELDS")),
        )
        pipeline.crawler = crawler
        # the node stops leasing while too many items wait for a store that is down
        parts_of(crawler).item_stores.append(sink)
        parts_of(crawler).item_markers.append(pipeline)
        _published_stores(crawler).append(sink.identity())
        if isinstance(sink, BufferedSink):
            # Once a running crawl is asked to stop (Ctrl-C, a control command), items
            # that wait for a store that is down are given up (their pages requeued)
            # rather than hold the shutdown up.
            sink.stopping = lambda: pipeline._was_crawling and is_stopping(crawler)
        return pipeline

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls._from_crawler_with_sink(crawler, cls.sink_from_crawler(crawler))

    @classmethod
    @abstractmethod
    def sink_from_crawler(cls, crawler: Crawler) -> ItemSink:
        """The store's sink, built from the crawler's settings; a wrong setting raises
        ConfigError naming it."""

    def open_spider(self, spider: Spider | None = None) -> None:
        """Resolve the job name and open the sink."""
        self._was_crawling = self.crawler is not None and self.crawler.crawling
        if not self.job:
            if spider is None and self.crawler is not None:
                spider = self.crawler.spider
            self.job = spider.name if spider is not None else "default"
        self.sink.open()
        logger.info("Items go to %s", self.sink.target)

    def record(self, item: Any) -> StoredItem:
        """The record stored for *item*; raises DropItem if it has no key, TypeError if a
        value cannot be stored."""
        adapter = ItemAdapter(item)
        try:
            key = self.keyer.key(adapter)
        except KeyUnavailable as exc:
            raise DropItem(f"not stored: {exc}") from None
        return StoredItem(
            key=key,
            job=self.job[:255],
            item_type=item_type(adapter)[:255],
            url=item_url(adapter),
            document=to_document(item),
        )

    async def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        """Store *item*; return once it is durable (see the module docstring). Raises
        ItemNotDurable when the store gave it up."""
        await self.sink.save(self.record(item))
        return item

    async def mark_gone(self, key: str, url: str | None, gone_at: str) -> None:
        """Set ``gone_at`` on the stored item with *key* (a no-op for a key not stored);
        return once that is durable. Raises ItemNotDurable when the store gave it up."""
        await self.sink.save(ItemMark(key, self.job[:255], url, gone_at))

    async def close_spider(self, spider: Spider | None = None) -> None:
        """Flush the sink; what it could not write is logged (and spilled) by the sink."""
        await self.sink.close()
        written = 0
        if self.crawler is not None and self.crawler.stats is not None:
            written = self.crawler.stats.get_value(f"crawlfleet/store/{self.sink.name}/written", 0)
        logger.info("%d items written to %s", written, self.sink.target)
