"""Reading a job's stored items back, newest first, a page at a time: the read side of
the SQL store (:mod:`crawlfleet.pipelines.sql`) and of the Redis stream
(:mod:`crawlfleet.pipelines.stream`), for the manager's items page and export.

Pages are keyset pages: a page ends with an opaque *cursor* that the next page starts
after (never an ``OFFSET``), so paging through a store that nodes are writing shows no
item twice and misses none of those already there (an item rewritten meanwhile moves
to the top: it is on the first page again, not on a later one).

- SQL: newest ``updated_at`` first, then the key (descending); the cursor holds both.
- Stream: newest entry first (``XREVRANGE``); the cursor is the last entry id. The
  stream holds the items that item workers have not moved into their store yet, every
  version of an item as its own entry; a filtered page reads at most
  :data:`STREAM_SCAN_MAX` entries, then ends early with a cursor to go on from.

Filters: *q*, a piece of the item's URL (any case), and one *field* = *value* of the
document (a string field equal to *value*, a number or true/false written as text;
compared as the database's JSON text value on SQL). MongoDB stores are not read here.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from redis.asyncio import Redis
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Engine, make_url

from crawlfleet.exceptions import ConfigError, ItemStoreUnavailable, MalformedEntry
from crawlfleet.pipelines.sql import (
    check_dialect,
    default_sql_url,
    items_table,
    row_document,
)
from crawlfleet.pipelines.stream import decode_entry, entry_time, is_mark_entry, redis_identity
from crawlfleet.redis.keys import JobKeys
from crawlfleet.redis.replies import text
from crawlfleet.state.url import state_db_identity

__all__ = [
    "FIELD_PATTERN",
    "PAGE_MAX",
    "STREAM_SCAN_MAX",
    "BrowsedItem",
    "ItemFilter",
    "ItemPage",
    "SqlItemReader",
    "read_stream_page",
]

#: Most items one page holds.
PAGE_MAX = 200
#: Most stream entries one filtered page reads before it ends early.
STREAM_SCAN_MAX = 10_000
#: What a document field named in a filter may be.
FIELD_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,99}$"
_FIELD = re.compile(FIELD_PATTERN)
_STREAM_ID = re.compile(r"^[0-9]{1,20}-[0-9]{1,20}$")
_STREAM_CHUNK = 500


@dataclass(frozen=True)
class ItemFilter:
    """Which items a page shows: *q* in the URL (any case), and *field* = *value*."""

    q: str = ""
    field: str = ""
    value: str = ""

    def __post_init__(self) -> None:
        if "\x00" in self.q + self.field + self.value:
            raise ConfigError("q, field and value must not hold a NUL character")
        if self.field and not _FIELD.match(self.field):
            raise ConfigError(
                "field must be 1-100 letters, digits, _ or - (a field of the item's document)"
            )
        if bool(self.field) != bool(self.value):
            raise ConfigError("field and value go together: give both, or neither")

    def matches(self, item: BrowsedItem) -> bool:
        """Whether *item* passes (the stream's filter; SQL filters in the query)."""
        if self.q and self.q.casefold() not in (item.url or "").casefold():
            return False
        if self.field:
            return _as_text(item.document.get(self.field, _MISSING)) == self.value
        return True


_MISSING = object()


def _as_text(value: Any) -> str | None:
    """A document value as a filter compares it: strings as they are, numbers and
    true/false as JSON writes them, anything else never equal."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    return None


@dataclass(frozen=True)
class BrowsedItem:
    """One stored item: its key, job, type, source URL, document and when it was stored
    (last written: SQL ``updated_at``; appended: a stream entry's time; UTC, naive)."""

    key: str
    job: str
    item_type: str
    url: str | None
    document: dict[str, Any]
    stored_at: dt.datetime
    #: SQL: when the key was first written; stream: None
    created_at: dt.datetime | None = None
    #: stream: the entry id; SQL: None
    entry: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "job": self.job,
            "item_type": self.item_type,
            "url": self.url,
            "stored_at": _iso(self.stored_at),
            "created_at": _iso(self.created_at) if self.created_at else None,
            "entry": self.entry,
            "document": self.document,
        }


def _iso(value: dt.datetime) -> str:
    return value.isoformat(timespec="milliseconds") + "Z"


@dataclass
class ItemPage:
    """A page of items, newest first; *cursor* starts the next page (None: no more).
    *scanned*: stream entries read; *malformed*: entries among them that could not be
    decoded (skipped)."""

    items: list[BrowsedItem]
    cursor: str | None
    scanned: int = 0
    malformed: int = 0
    notes: list[str] = field(default_factory=list)


# --- cursors ---------------------------------------------------------------------------


def _encode_cursor(parts: Sequence[str]) -> str:
    raw = json.dumps(list(parts), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str, size: int) -> list[str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        parts = json.loads(raw)
    except (binascii.Error, ValueError):
        parts = None
    if (
        not isinstance(parts, list)
        or len(parts) != size
        or not all(isinstance(p, str) for p in parts)
    ):
        raise ConfigError("cursor is not one this manager gave (take next_cursor of a page)")
    return parts


# --- SQL ---------------------------------------------------------------------------------


class SqlItemReader:
    """Reads the items table of *url* (``CRAWLFLEET_SQL_URL``, empty: ``items.sqlite3``
    under *data_dir*) called *table*. ConfigError now for a URL or table name that cannot
    be; the engine is made at the first read (a missing driver, an unreachable server:
    :class:`~crawlfleet.exceptions.ItemStoreUnavailable` then). Blocking: call from a
    worker thread. :meth:`close` disposes of the engine."""

    def __init__(self, url: str, *, table: str, data_dir: Path) -> None:
        text = url.strip() or default_sql_url(data_dir)
        try:
            self.url: URL = make_url(text)
        except sa_exc.ArgumentError:
            raise ConfigError("CRAWLFLEET_SQL_URL is not a database URL") from None
        check_dialect(self.url)
        self.table = items_table(table)
        #: which database this is, as nodes publish theirs (never a password)
        self.where = state_db_identity(self.url.render_as_string(hide_password=True))
        self._engine: Engine | None = None
        self._engine_lock = threading.Lock()
        self._has_table = False  # once seen, not asked again

    @property
    def identity(self) -> dict[str, str]:
        """As :meth:`crawlfleet.pipelines.sql.SqlSink.identity` says its store."""
        return {"store": "sql", "database": self.where, "table": self.table.name}

    def _unavailable(self, what: str) -> ItemStoreUnavailable:
        return ItemStoreUnavailable(
            f"the SQL item store {self.where} (table {self.table.name}) {what}; "
            "CRAWLFLEET_SQL_URL and CRAWLFLEET_SQL_TABLE of the manager's settings say "
            "where it reads items: set them as the nodes have them"
        )

    def _sqlite_file(self) -> Path | None:
        database = self.url.database
        if self.url.get_backend_name() != "sqlite" or not database or database == ":memory:":
            return None
        return Path(database)

    def engine(self) -> Engine:
        """The engine, made once (a pool of a few connections)."""
        with self._engine_lock:
            return self._make_engine()

    def _make_engine(self) -> Engine:
        if self._engine is None:
            try:
                self._engine = sa.create_engine(
                    self.url,
                    pool_pre_ping=True,
                    pool_size=2,
                    max_overflow=2,
                    **_engine_args(self.url),
                )
            except (ImportError, sa_exc.NoSuchModuleError, sa_exc.ArgumentError) as exc:
                raise self._unavailable(f"cannot be opened ({type(exc).__name__})") from None
        return self._engine

    def missing(self) -> str | None:
        """Why there is nothing to read yet (no SQLite file, no table), or None."""
        path = self._sqlite_file()
        if path is not None and not path.is_file():
            return (
                f"no SQL item store at {self.where} yet: the nodes make it at their "
                "first item (if they store elsewhere, set CRAWLFLEET_SQL_URL of the manager "
                "to theirs)"
            )
        if self._has_table:
            return None
        try:
            with self.engine().connect() as conn:
                present = sa.inspect(conn).has_table(self.table.name)
        except sa_exc.SQLAlchemyError as exc:
            raise self._unavailable(f"did not answer ({type(exc).__name__})") from None
        self._has_table = present
        if not present:
            return (
                f"no table {self.table.name} in the SQL item store {self.where} yet: the "
                "nodes make it at their first item (CRAWLFLEET_SQL_TABLE names it)"
            )
        return None

    def page(self, job: str, filters: ItemFilter, limit: int, cursor: str | None) -> ItemPage:
        """Up to *limit* items of *job*, newest first, after *cursor*."""
        if not 1 <= limit <= PAGE_MAX:
            raise ConfigError(f"limit must be 1 to {PAGE_MAX}")
        after = None
        if cursor:
            stamp, key = _decode_cursor(cursor, 2)
            try:
                when = dt.datetime.fromisoformat(stamp)
            except ValueError:
                when = None
            if when is None or when.tzinfo is not None or "\x00" in key:
                raise ConfigError("cursor is not one this manager gave") from None
            after = (when, key)
        note = self.missing()
        if note is not None:
            return ItemPage([], None, notes=[note])
        t = self.table
        query = sa.select(t).where(t.c.job == job)
        if filters.q:
            query = query.where(t.c.url.icontains(filters.q, autoescape=True))
        if filters.field:
            query = query.where(self._field_text(filters.field) == filters.value)
        if after is not None:
            stamp_, key_ = after
            query = query.where(
                sa.or_(t.c.updated_at < stamp_, sa.and_(t.c.updated_at == stamp_, t.c.key < key_))
            )
        query = query.order_by(t.c.updated_at.desc(), t.c.key.desc()).limit(limit + 1)
        try:
            with self.engine().connect() as conn:
                rows = conn.execute(query).mappings().all()
        except sa_exc.SQLAlchemyError as exc:
            self._has_table = False  # dropped meanwhile? the next page looks again
            raise self._unavailable(f"did not answer ({type(exc).__name__})") from None
        items = [_row_item(row) for row in rows[:limit]]
        more = len(rows) > limit
        next_cursor = None
        if more and items:
            last = items[-1]
            next_cursor = _encode_cursor([last.stored_at.isoformat(), last.key])
        return ItemPage(items, next_cursor)

    def _field_text(self, name: str) -> sa.ColumnElement[Any]:
        """The document's field *name* as text, on every backend alike: a string as it
        is, a number as written, true/false as words (JSON's text of the value)."""
        document = self.table.c.document
        text: sa.ColumnElement[Any] = sa.cast(document[name].as_string(), sa.Text)
        backend = self.url.get_backend_name()
        if backend == "sqlite":  # json_extract gives true/false as 1/0
            kind = sa.func.json_type(document, f"$.{json.dumps(name)}")
            text = sa.case(
                (kind == "true", sa.literal("true")),
                (kind == "false", sa.literal("false")),
                else_=text,
            )
        elif backend in ("mysql", "mariadb"):
            text = text.collate("utf8mb4_bin")  # else its JSON text compares in any case
        return text

    def close(self) -> None:
        """Dispose of the engine (its connections)."""
        with self._engine_lock:
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None


def _engine_args(url: URL) -> dict[str, Any]:
    backend = url.get_backend_name()
    if backend == "sqlite":
        return {"connect_args": {"timeout": 5.0}}
    if backend == "postgresql":
        return {"connect_args": {"connect_timeout": 5, "application_name": "crawlfleet-manager"}}
    return {"connect_args": {"connect_timeout": 5, "read_timeout": 60, "charset": "utf8mb4"}}


def _row_item(row: Any) -> BrowsedItem:
    document = row_document(row)
    return BrowsedItem(
        key=row["key"],
        job=row["job"],
        item_type=row["item_type"],
        url=row["url"],
        document=document if isinstance(document, dict) else {"value": document},
        stored_at=row["updated_at"],
        created_at=row["created_at"],
    )


# --- the Redis stream ----------------------------------------------------------------------


def stream_identity(url: str, prefix: str) -> dict[str, str]:
    """As :meth:`crawlfleet.pipelines.stream.RedisStreamSink.identity` says its store."""
    return {"store": "stream", "redis": redis_identity(url), "prefix": prefix}


async def read_stream_page(
    client: Redis, keys: JobKeys, filters: ItemFilter, limit: int, cursor: str | None
) -> ItemPage:
    """Up to *limit* entries of *keys*' item stream, newest first, before the entry of
    *cursor*; a filtered page reads at most :data:`STREAM_SCAN_MAX` entries."""
    if not 1 <= limit <= PAGE_MAX:
        raise ConfigError(f"limit must be 1 to {PAGE_MAX}")
    end = b"+"
    if cursor:
        (entry_id,) = _decode_cursor(cursor, 1)
        if not _STREAM_ID.match(entry_id):
            raise ConfigError("cursor is not one this manager gave")
        end = b"(" + entry_id.encode()
    filtered = bool(filters.q or filters.field)
    page = ItemPage([], None)
    while page.scanned < STREAM_SCAN_MAX:
        count = _STREAM_CHUNK if filtered else limit + 1 - len(page.items)
        chunk: list[tuple[bytes, dict[bytes, bytes]]] = await client.xrevrange(  # type: ignore[assignment]
            keys.items, end, b"-", count=count
        )
        for position, (raw_id, fields) in enumerate(chunk):
            if len(page.items) == limit:  # one more entry is there: a next page
                page.cursor = _encode_cursor([page.items[-1].entry or ""])
                return page
            page.scanned += 1
            entry_id = text(raw_id)
            if is_mark_entry(fields):
                pass  # a mark of an item (its page gone), not an item
            elif (item := _entry_item(entry_id, fields)) is None:
                page.malformed += 1
            elif filters.matches(item):
                page.items.append(item)
            if position == len(chunk) - 1:
                end = b"(" + entry_id.encode()
        if len(chunk) < count:
            return page  # the stream's oldest entry was read
    page.cursor = _encode_cursor([end[1:].decode()])
    if len(page.items) < limit:
        page.notes.append(
            f"{page.scanned} stream entries were read for this page (at most "
            f"{STREAM_SCAN_MAX}): older ones may match too; go on from its cursor"
        )
    return page


def _entry_item(entry_id: str, fields: dict[bytes, bytes]) -> BrowsedItem | None:
    """The item of one stream entry, None when it cannot be decoded."""
    try:
        record = decode_entry(fields)
    except MalformedEntry:
        return None
    return BrowsedItem(
        record.key,
        record.job,
        record.item_type,
        record.url,
        record.document,
        stored_at=entry_time(entry_id),
        entry=entry_id,
    )
