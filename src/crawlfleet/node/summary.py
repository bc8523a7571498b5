"""A node's run in figures: logged when it closes, kept in Redis for ``job status``."""

from __future__ import annotations

import logging
import time
from typing import Any

__all__ = ["log_summary", "run_summary"]

logger = logging.getLogger(__name__)


def run_summary(stats: dict[str, Any], node: str, reason: str, started: float) -> dict[str, Any]:
    """The figures of node *node*'s run from its Scrapy *stats* (closed for *reason*;
    *started*: its start, epoch seconds)."""
    now = time.time()
    seconds = max(0.0, now - started)
    pages = int(stats.get("response_received_count", 0))
    errors = sum(
        int(v)
        for k, v in stats.items()
        if k.startswith(("spider_exceptions/", "downloader/exception_type_count/"))
        or k == "crawlfleet/frontier/malformed"
    )
    return {
        "node": node,
        "reason": reason,
        "started": started,
        "finished": now,
        "seconds": round(seconds, 2),
        "pages": pages,
        "pages_per_second": round(pages / seconds, 2) if seconds else 0.0,
        "items": int(stats.get("item_scraped_count", 0)),
        "items_dropped": int(stats.get("item_dropped_count", 0)),
        # store name -> items written (the store's log line says where to)
        "stored": {
            k.split("/")[2]: int(v)
            for k, v in sorted(stats.items())
            if k.startswith("crawlfleet/store/") and k.endswith("/written")
        },
        "errors": errors,
        "unstored": int(stats.get("crawlfleet/frontier/unstored", 0)),
    }


def log_summary(s: dict[str, Any], targets: list[str] | None = None) -> None:
    """Log the run *s*; *targets*: where its item stores write (said after the counts,
    or, when items were scraped and no store is configured, that they went nowhere)."""
    stored = ", ".join(f"{n} {c}" for n, c in s["stored"].items()) or "none"
    if targets:
        stored += f" (into {'; '.join(targets)})"
    elif s["items"] and not s["stored"]:
        stored += " (no crawlfleet store: set CRAWLFLEET_STORES, e.g. sql)"
    logger.info(
        "crawlfleet node %s closed (%s) after %.1fs: %d pages (%.1f/s), %d items, "
        "stored: %s, %d errors; shared state left in place",
        s["node"],
        s["reason"],
        s["seconds"],
        s["pages"],
        s["pages_per_second"],
        s["items"],
        stored,
        s["errors"],
    )
