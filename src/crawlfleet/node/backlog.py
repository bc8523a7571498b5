"""Unstored work: the items a node holds that its item stores have not written yet.

A page is acknowledged only once its items are durable, so every item a store has not
written is a page a crash would have fetched again. The node keeps that bounded: once
``CRAWLFLEET_ITEMS_PENDING_MAX`` items wait for a store (one that is down, or slower
than the crawl), it leases nothing and hands its engine nothing until they are
written; while a store is down it also gives back the requests it holds ready. The
store pipelines register their sinks in the crawler's
``parts_of(crawler).item_stores`` (:mod:`crawlfleet.parts`); the sync loop and the
scheduler ask :meth:`Backlog.over`, and the sync loop has :meth:`Backlog.watch` say when
the node starts and stops waiting for its stores.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from crawlfleet.parts import StoreGauge

__all__ = ["WAITING_FOR_STORE", "Backlog"]

logger = logging.getLogger(__name__)

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
        #: the node waits for its item stores (the backlog was over its bound when last
        #: watched): it takes no work, its state says WAITING_FOR_STORE
        self.waiting_for_store = False
        self._said_down = False  # a store that is down was named in a WARNING

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

    def watch(self, node_id: str, give_back: Callable[[], None]) -> bool:
        """Look at the backlog (each round of node *node_id*'s sync loop). Once it is
        over its bound the node waits for its stores (a crash now fetches again only the
        pages of those items and the ones in flight); while a store is down, *give_back*
        gives back the requests the node holds ready, and the store is named once in a
        WARNING. True when ``waiting_for_store`` changed: the caller says so in the
        node's status, and takes work again when the wait is over."""
        over = self.over()
        down = self.down() if over else []
        if down:
            give_back()
            if not self._said_down:
                self._said_down = True
                logger.warning(
                    "Item store %s is unreachable and %d items wait for it "
                    "(CRAWLFLEET_ITEMS_PENDING_MAX %d): node %s is waiting for the item "
                    "store, taking no work until they are written",
                    ", ".join(store.target for store in down),
                    self.waiting(),
                    self.limit,
                    node_id,
                )
        if over == self.waiting_for_store:
            return False
        self.waiting_for_store = over
        if over:
            if not down:  # a store slower than the crawl: back-pressure, for a moment
                logger.debug(
                    "%d items wait for the item stores (CRAWLFLEET_ITEMS_PENDING_MAX %d): "
                    "node %s takes no work until they are written",
                    self.waiting(),
                    self.limit,
                    node_id,
                )
        elif self._said_down:
            self._said_down = False
            logger.info("Items written: node %s takes work again", node_id)
        return True
