"""What an item worker is given and what it reports: its options (from settings, with
the command's overrides), its final report, and the store a ``--to URL`` names."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any, Self

from scrapy.settings import BaseSettings

from crawlfleet.exceptions import ConfigError
from crawlfleet.pipelines.buffered import BufferedSink, StoreOptions
from crawlfleet.pipelines.mongo import mongo_sink_from_settings
from crawlfleet.pipelines.sql import SqlSink
from crawlfleet.settings.access import get_bool, get_float, get_str

__all__ = ["WorkerOptions", "WorkerReport", "default_consumer_name", "store_for_url"]


def default_consumer_name() -> str:
    """``<host>-<pid>``: unique per running worker."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class WorkerOptions:
    """How an item worker reads, claims and retries."""

    group: str = "items"
    consumer: str = field(default_factory=default_consumer_name)
    #: Entries read (and written to the store) per batch.
    batch_items: int = 500
    #: Longest blocking read; the worker notices a stop request at least this often.
    block_seconds: float = 1.0
    #: Entries pending with another consumer for this long are claimed.
    claim_idle_seconds: float = 60.0
    #: Delete entries once every group of the stream has stored them.
    delete_stored: bool = True
    #: Return once the group has nothing left: no new entries, nothing pending.
    until_empty: bool = False
    retry_min_seconds: float = 0.5
    retry_max_seconds: float = 30.0

    def __post_init__(self) -> None:
        if not self.group or not self.consumer:
            raise ConfigError("item worker group and consumer names must not be empty")
        if self.batch_items < 1:
            raise ConfigError(
                f"item worker batch (--batch, CRAWLFLEET_STORE_BATCH_ITEMS) must be >= 1, "
                f"got {self.batch_items}"
            )
        if self.claim_idle_seconds <= 0:
            raise ConfigError(
                f"claim idle time (--claim-idle, CRAWLFLEET_ITEMS_CLAIM_IDLE_SECONDS) must "
                f"be > 0, got {self.claim_idle_seconds}"
            )
        if self.block_seconds <= 0:
            raise ConfigError(f"block_seconds must be > 0, got {self.block_seconds}")
        if not 0 < self.retry_min_seconds <= self.retry_max_seconds:
            raise ConfigError("retry seconds must satisfy 0 < retry_min <= retry_max")

    @classmethod
    def from_settings(cls, settings: BaseSettings, **overrides: Any) -> Self:
        """Read CRAWLFLEET_ITEMS_* and the store retry settings; *overrides* win (CLI
        options; None values are ignored)."""
        store = StoreOptions.from_settings(settings)
        values: dict[str, Any] = {
            "group": get_str(settings, "CRAWLFLEET_ITEMS_GROUP").strip(),
            "batch_items": store.batch_items,
            "claim_idle_seconds": get_float(
                settings, "CRAWLFLEET_ITEMS_CLAIM_IDLE_SECONDS", minimum=0, strict=True
            ),
            "delete_stored": get_bool(settings, "CRAWLFLEET_ITEMS_DELETE_STORED"),
            "retry_min_seconds": store.retry_min_seconds,
            "retry_max_seconds": store.retry_max_seconds,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


@dataclass
class WorkerReport:
    """What a worker did (also logged when it stops)."""

    #: Entries received: new, own pending after a restart, and claimed.
    read: int = 0
    #: Entries claimed from other consumers (dead or too slow workers).
    claimed: int = 0
    #: Records upserted into the store (after keeping the latest of a key per batch).
    stored: int = 0
    #: Entries acknowledged after their batch was stored.
    acknowledged: int = 0
    #: Entries moved to the dead-letter stream (malformed, or refused by the store).
    dead_lettered: int = 0
    #: Entries deleted from the stream (every group had stored them).
    deleted: int = 0
    #: Failed attempts to reach the store or Redis.
    retries: int = 0
    #: Entries this worker still held unacknowledged when it stopped.
    left_pending: int = 0


def store_for_url(url: str, settings: BaseSettings) -> BufferedSink:
    """The store at *url*: ``mongodb://`` / ``mongodb+srv://`` -> MongoDB (database and
    collection from ``CRAWLFLEET_MONGODB_*``), anything else -> SQL (SQLAlchemy URL,
    table ``CRAWLFLEET_SQL_TABLE``). Raises ConfigError for a wrong URL."""
    url = url.strip()
    try:
        if url.startswith(("mongodb://", "mongodb+srv://")):
            return mongo_sink_from_settings(settings, url=url)
        return SqlSink(
            url,
            table=get_str(settings, "CRAWLFLEET_SQL_TABLE"),
            options=StoreOptions.from_settings(settings),
        )
    except ConfigError as exc:
        raise ConfigError(f"store URL {url!r}: {exc}") from None
