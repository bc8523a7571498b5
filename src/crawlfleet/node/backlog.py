"""Unstored work: the items a node holds that its item stores have not written yet.

A page is acknowledged only once its items are durable, so every item a store has not
written is a page a crash would have fetched again. The node keeps that bounded: once
``CRAWLFLEET_ITEMS_PENDING_MAX`` items wait for a store (one that is down, or slower
than the crawl), it leases nothing and hands its engine nothing until they are
written; while a store is down it also gives back the requests it holds ready. The
store pipelines register their sinks in the crawler's
``parts_of(crawler).item_stores`` (:mod:`crawlfleet.parts`); the sync loop and the
scheduler ask :meth:`Backlog.over`.
"""

from __future__ import annotations

from crawlfleet.parts import StoreGauge

__all__ = ["WAITING_FOR_STORE", "Backlog"]

#: The node state shown while it waits for an item store (`crawlfleet status`, the
#: dashboard).
WAITING_FOR_STORE = "waiting for the item store"


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
