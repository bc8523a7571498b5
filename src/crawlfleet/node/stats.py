"""A node's Scrapy stats as its parts use them: counting works with no stats collector
too (tools and tests build the parts without a crawler)."""

from __future__ import annotations

from typing import Any

__all__ = ["NodeStats"]


class NodeStats:
    """``inc``, ``get`` and ``set`` on a Scrapy stats collector, or on nothing."""

    def __init__(self, stats: Any = None) -> None:
        self.stats = stats

    def inc(self, key: str, count: int = 1) -> None:
        if self.stats is not None and count:
            self.stats.inc_value(key, count)

    def get(self, key: str) -> int:
        return int(self.stats.get_value(key, 0)) if self.stats is not None else 0

    def set(self, key: str, value: Any) -> None:
        if self.stats is not None:
            self.stats.set_value(key, value)

    def all(self) -> dict[str, Any]:
        return dict(self.stats.get_stats()) if self.stats is not None else {}
