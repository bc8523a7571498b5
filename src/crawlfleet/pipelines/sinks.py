"""The item-sink boundary: what a store receives and what it promises.

A store (SQL, MongoDB, a Redis stream ...) implements :class:`ItemSink`. The store
pipeline turns each item into a :class:`StoredItem` (key, job, type, URL and a
JSON-safe document) and hands it to the sink; the sink writes it in the background, in
batches, and tells the pipeline when it is durable. Every sink passes the
same contract test (``tests/pipelines/test_sink_contract.py``). The crawl awaits
:meth:`ItemSink.save`, so a page is acknowledged only once its items are durable.

A sink also takes :class:`ItemMark` records, on the same path and with the same
durability: a partial update of an item already stored, by key (today: the page of the
item is gone, ``gone_at`` is set in its document, the rest kept). A mark of a key that
is not stored changes nothing.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from itemadapter import ItemAdapter

from crawlfleet.pipelines._util import is_internal
from crawlfleet.pipelines.charset import to_valid_utf8

__all__ = [
    "GONE_AT",
    "ItemMark",
    "ItemSink",
    "Record",
    "StoredItem",
    "record_from_json",
    "to_document",
    "to_json_value",
]

#: The document field a mark sets: when the item's page was found gone (ISO 8601, UTC).
GONE_AT = "gone_at"


@dataclass(frozen=True, slots=True)
class StoredItem:
    """One item as stores keep it.

    *key* identifies the item (upsert key); *document* holds the item's public fields
    (names not starting with ``_``), JSON-safe. The timestamps are set by the store
    (UTC, naive): None on records that were not read back from a store.
    """

    key: str
    job: str
    item_type: str
    url: str | None
    document: dict[str, Any]
    created_at: dt.datetime | None = field(default=None, compare=False)
    updated_at: dt.datetime | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        """A JSON object of the record without timestamps (used for spill files)."""
        return {
            "key": self.key,
            "job": self.job,
            "item_type": self.item_type,
            "url": self.url,
            "document": self.document,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StoredItem:
        """The record written by :meth:`to_json`; raises ValueError if malformed."""
        try:
            key, job, kind = data["key"], data["job"], data["item_type"]
            url, document = data.get("url"), data["document"]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a stored item: missing {exc}") from None
        if not all(isinstance(v, str) for v in (key, job, kind)) or not isinstance(document, dict):
            raise ValueError("not a stored item: key, job, item_type or document has a wrong type")
        return cls(key, job, kind, url if isinstance(url, str) else None, document)


@dataclass(frozen=True, slots=True)
class ItemMark:
    """A partial update of the stored item with *key*: its page (*url*) was found gone
    at *gone_at* (ISO 8601, UTC); stores set ``gone_at`` in its document and keep the
    rest. *job* is the job that marks it (the stream it goes to)."""

    key: str
    job: str
    url: str | None
    gone_at: str

    def to_json(self) -> dict[str, Any]:
        """A JSON object of the mark (used for spill files)."""
        return {
            "mark": GONE_AT,
            "key": self.key,
            "job": self.job,
            "url": self.url,
            GONE_AT: self.gone_at,
        }


#: What a sink writes: an item, or a mark of one.
Record = StoredItem | ItemMark


def record_from_json(data: Mapping[str, Any]) -> Record:
    """The item or mark written by its ``to_json``; raises ValueError if malformed."""
    if not isinstance(data, Mapping) or "mark" not in data:
        return StoredItem.from_json(data)
    key, job, url, when = data.get("key"), data.get("job"), data.get("url"), data.get(GONE_AT)
    if data["mark"] != GONE_AT or not all(isinstance(v, str) for v in (key, job, when)):
        raise ValueError("not a mark: mark, key, job or gone_at missing or of a wrong type")
    return ItemMark(str(key), str(job), url if isinstance(url, str) else None, str(when))


def to_json_value(value: Any, path: str = "item") -> Any:
    """*value* as plain JSON data that every store accepts.

    Strings are made valid UTF-8 without NUL; tuples and sets become lists; dates and
    times ISO strings; Decimals numbers; bytes text (UTF-8, else base64 in
    ``{"base64": ...}``); non-finite floats None; dict keys strings. Raises TypeError
    naming *path* for anything else.
    """
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, str):
        return to_valid_utf8(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {to_valid_utf8(str(k)): to_json_value(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple | Set):
        return [to_json_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return None
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes | bytearray):
        try:
            return to_valid_utf8(bytes(value).decode("utf-8"))
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    raise TypeError(f"{path}: {type(value).__name__} values cannot be stored ({value!r:.60})")


def to_document(item: Any) -> dict[str, Any]:
    """The public fields of *item* as a JSON-safe dict (see :func:`to_json_value`)."""
    adapter = ItemAdapter(item)
    return {
        name: to_json_value(value, name) for name, value in adapter.items() if not is_internal(name)
    }


class ItemSink(ABC):
    """A store of items, written in the background.

    Lifecycle: :meth:`open` once, then :meth:`put` any number of times from the reactor
    thread, then :meth:`close` once. Records with the same key are upserted: the last
    one written wins, and a store never holds two records with one key. A mark
    (:class:`ItemMark`) updates the record with its key as it is at that point of the
    sequence (an item written after it replaces the mark's change too); a mark of a
    key not stored is a no-op.
    """

    #: Short name used in logs and stats (``crawlfleet/store/<name>/...``).
    name: str = "sink"

    @property
    def target(self) -> str:
        """What this sink writes to, for log lines (no passwords)."""
        return self.name

    def identity(self) -> dict[str, str]:
        """Which store this is, to compare with what another process reads: published
        with the node's heartbeat (``item_stores``). Never a user or password."""
        return {"store": self.name}

    @abstractmethod
    def open(self) -> None:
        """Start the sink. Must not wait for the store: a store that is down at start is
        retried in the background like one that goes down later."""

    @abstractmethod
    async def put(self, record: Record) -> None:
        """Accept *record* (an item or a mark) for writing. Returns as soon as the
        record is buffered; waits (back-pressure) only while the buffer is full. Raises
        RuntimeError after close."""

    @abstractmethod
    async def save(self, record: Record) -> None:
        """Accept *record* and return once it is durable in the store (or refused as bad
        data and set aside, with an ERROR log). Raises
        :class:`~crawlfleet.exceptions.ItemNotDurable` if the sink gives the record up
        unwritten (the crawl is stopping while the store is down)."""

    @abstractmethod
    async def close(self) -> int:
        """Write everything buffered, waiting at most the sink's close timeout.

        Returns the number of records that could not be written (0: all written); the
        sink keeps those somewhere durable and says where in an ERROR log line.
        """

    @property
    @abstractmethod
    def pending(self) -> int:
        """Records accepted but not yet written."""

    @property
    def unreachable(self) -> bool:
        """The store is down (its records wait in memory). Safe from any thread."""
        return False

    @abstractmethod
    def get(self, key: str) -> StoredItem | None:
        """The stored record with *key*, or None if there is none. Blocking: for tools and
        tests, not for the reactor thread."""

    @abstractmethod
    def count(self) -> int:
        """Number of records in the store (all jobs). Blocking, like :meth:`get`."""
