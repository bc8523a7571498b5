"""Unstored work: the items a node holds that its item stores have not written yet.

A page is acknowledged only once its items are durable, so every item a store has not
written is a page a crash would have fetched again. The node keeps that bounded: once
``CRAWLFLEET_ITEMS_PENDING_MAX`` items wait for a store (one that is down, or slower
than the crawl), it leases nothing and hands its engine nothing until they are
written; while a store is down it also gives back the requests it holds ready. The
store pipelines register their sinks with :func:`item_stores`; the sync loop and the
scheduler ask :meth:`Backlog.over`.
"""

from __future__ import annotations

from typing import Protocol

from scrapy.crawler import Crawler

__all__ = ["WAITING_FOR_STORE", "Backlog", "StoreGauge", "item_stores"]

#: The node state shown while it waits for an item store (`crawlfleet status`, the
#: dashboard).
WAITING_FOR_STORE = "waiting for the item store"


class StoreGauge(Protocol):
    """What the node reads of an item store (a sink)."""

    @property
    def target(self) -> str:
        """What the store writes to, for log lines."""

    @property
    def pending(self) -> int:
        """Records accepted but not written yet."""

    @property
    def unreachable(self) -> bool:
        """The store is down: its last attempt failed and nothing was written since."""


def item_stores(crawler: Crawler) -> list[StoreGauge]:
    """The crawler's list of item stores (created on first use): each store pipeline
    appends its sink, the node watches them."""
    stores: list[StoreGauge] | None = getattr(crawler, "crawlfleet_item_stores", None)
    if stores is None:
        stores = []
        crawler.crawlfleet_item_stores = stores  # type: ignore[attr-defined]
    return stores


class Backlog:
    """The items waiting for *stores*, against the bound *limit*."""

    def __init__(self, limit: int, stores: list[StoreGauge] | None = None) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit = limit
        self.stores: list[StoreGauge] = stores if stores is not None else []

    def down(self) -> list[StoreGauge]:
        """The stores that are down now."""
        return [store for store in self.stores if store.unreachable]

    def waiting(self) -> int:
        """Items not written yet by the store that has most of them (each item goes to
        every store: a page is done once the slowest store wrote its items)."""
        return max((store.pending for store in self.stores), default=0)

    def over(self) -> bool:
        """At least ``limit`` items wait for a store: take no more work."""
        return self.waiting() >= self.limit
