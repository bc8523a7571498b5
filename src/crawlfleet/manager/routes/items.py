"""``/api/v1/jobs/{job}/items``: a job's stored items, newest first, a page at a time, and
their export (JSON lines or CSV). A viewer may read and export.

``source=sql`` reads the SQL item store the manager's own settings name
(``CRAWLFLEET_SQL_URL``, ``CRAWLFLEET_SQL_TABLE``: as the nodes have them);
``source=stream`` the job's Redis stream in the fleet's Redis: the items that item
workers have not moved into their store yet. MongoDB stores are not browsable from the
manager. Each answer says which store it read (``store``) and which live nodes of the
job store into another one of that kind (``nodes_elsewhere``): their items are not here.
See :mod:`crawlfleet.pipelines.browse` for paging and filters.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from crawlfleet.fleet.snapshot import snapshot
from crawlfleet.manager.auth import Ctx, Viewer
from crawlfleet.manager.context import ManagerContext
from crawlfleet.manager.routes.models import JobPath
from crawlfleet.pipelines.browse import (
    FIELD_PATTERN,
    PAGE_MAX,
    BrowsedItem,
    ItemFilter,
    ItemPage,
    read_stream_page,
    stream_identity,
)
from crawlfleet.redis.connection import REDIS_FAILURES

__all__ = ["ItemOut", "ItemsAnswer", "csv_cell", "router"]

router = APIRouter(prefix="/api/v1/jobs/{job}/items", tags=["items"])

Source = Literal["sql", "stream"]
SourceQuery = Annotated[
    Source,
    Query(description="sql: the SQL item store; stream: the job's Redis stream (not moved yet)"),
]
QQuery = Annotated[str | None, Query(max_length=500, description="a piece of the item's URL")]
FieldQuery = Annotated[
    str | None,
    Query(pattern=FIELD_PATTERN, max_length=100, description="a field of the item's document"),
]
ValueQuery = Annotated[
    str | None, Query(max_length=1000, description="what that field is (as text)")
]
#: Most field columns of a CSV export (the other fields are in the JSON lines export).
CSV_FIELDS_MAX = 500
#: The CSV columns every export starts with.
CSV_FIXED = ("key", "url", "stored_at")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


class ItemOut(BaseModel):
    """One stored item."""

    key: str
    job: str
    item_type: str
    #: the page the item came from
    url: str | None
    #: when it was stored (last written; for the stream: appended), UTC
    stored_at: str
    #: SQL: when its key was first written
    created_at: str | None
    #: stream: the entry's id
    entry: str | None
    #: the item's public fields
    document: dict[str, Any]


class ItemsAnswer(BaseModel):
    job: str
    source: Source
    #: the store read: sql {database, table}, stream {redis, prefix}
    store: dict[str, str]
    items: list[ItemOut]
    #: give it as ``cursor`` for the next (older) page; null: no more
    next_cursor: str | None
    #: stream: entries read for this page, and those that could not be decoded (skipped)
    scanned: int
    malformed: int
    #: live nodes of the job that store into another store of this kind: node -> where
    nodes_elsewhere: dict[str, str]
    #: what the reader should know (no store yet, stores the manager cannot read ...)
    notes: list[str]


def describe(identity: dict[str, str]) -> str:
    """Where a store is, as one line (no password is ever in an identity)."""
    kind = identity.get("store", "?")
    if kind == "sql":
        return f"{identity.get('database', '?')} table {identity.get('table', '?')}"
    if kind == "stream":
        return f"{identity.get('redis', '?')} prefix {identity.get('prefix', '?')}"
    if kind == "mongodb":
        return f"{identity.get('server', '?')} collection {identity.get('collection', '?')}"
    return kind


def _published(info: dict[str, Any]) -> list[dict[str, str]]:
    """The item stores a node published (what is not a store's identity is left out)."""
    stores = info.get("item_stores")
    if not isinstance(stores, list):
        return []
    return [
        {str(k)[:50]: str(v)[:500] for k, v in s.items()}
        for s in stores[:20]
        if isinstance(s, dict) and isinstance(s.get("store"), str)
    ]


async def _nodes_elsewhere(
    ctx: ManagerContext, job: str, mine: dict[str, str]
) -> tuple[dict[str, str], list[str]]:
    """Live nodes of *job* storing into another store of *mine*'s kind, and notes."""
    try:
        snap = await snapshot(ctx.redis, ctx.keys(job), ctx.limits)
    except REDIS_FAILURES as exc:
        return {}, [f"Redis did not answer ({type(exc).__name__}): the nodes' stores are unknown"]
    elsewhere: dict[str, str] = {}
    mongo: dict[str, str] = {}
    for node, info in sorted(snap.nodes.items()):
        if not info["alive"]:
            continue
        for store in _published(info):
            if store["store"] == mine["store"] and store != mine:
                elsewhere[node] = describe(store)
            elif store["store"] == "mongodb":
                mongo[node] = describe(store)
    notes = []
    if mongo:
        where = ", ".join(sorted(set(mongo.values())))
        notes.append(
            f"{len(mongo)} live node(s) also store into MongoDB ({where}): MongoDB items "
            "are not browsable from the manager yet"
        )
    return elsewhere, notes


def _filters(q: str | None, field: str | None, value: str | None) -> ItemFilter:
    return ItemFilter(q=q or "", field=field or "", value=value or "")


async def _page(
    ctx: ManagerContext,
    job: str,
    source: Source,
    filters: ItemFilter,
    limit: int,
    cursor: str | None,
) -> tuple[dict[str, str], ItemPage]:
    if source == "sql":
        page = await ctx.in_db(ctx.items.page, job, filters, limit, cursor)
        return ctx.items.identity, page
    page = await read_stream_page(ctx.redis, ctx.keys(job), filters, limit, cursor)
    return stream_identity(ctx.redis_url, ctx.key_prefix), page


@router.get("", summary="the job's stored items, newest first (a page; filters: URL, a field)")
async def items(
    job: JobPath,
    ctx: Ctx,
    _: Viewer,
    source: SourceQuery = "sql",
    q: QQuery = None,
    field: FieldQuery = None,
    value: ValueQuery = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = 50,
    cursor: Annotated[str | None, Query(max_length=2000, pattern=r"^[A-Za-z0-9_-]*$")] = None,
) -> ItemsAnswer:
    ctx.keys(job)
    filters = _filters(q, field, value)
    mine, page = await _page(ctx, job, source, filters, limit, cursor or None)
    elsewhere, notes = await _nodes_elsewhere(ctx, job, mine)
    if elsewhere:
        notes.append(
            f"{len(elsewhere)} live node(s) store their items elsewhere, not shown here: "
            + ", ".join(f"{node} ({where})" for node, where in elsewhere.items())
            + f". This manager reads {describe(mine)}"
            + (
                ": set CRAWLFLEET_SQL_URL and CRAWLFLEET_SQL_TABLE of the manager as the "
                "nodes have them"
                if source == "sql"
                else ": the nodes use another Redis or key prefix"
            )
        )
    return ItemsAnswer(
        job=job,
        source=source,
        store=mine,
        items=[ItemOut(**item.to_json()) for item in page.items],
        next_cursor=page.cursor,
        scanned=page.scanned,
        malformed=page.malformed,
        nodes_elsewhere=elsewhere,
        notes=page.notes + notes,
    )


async def _every_item(
    ctx: ManagerContext, job: str, source: Source, filters: ItemFilter, first: ItemPage
) -> AsyncIterator[BrowsedItem]:
    """The items of *first* and of the pages after it, at most the export bound."""
    page, given = first, 0
    while True:
        for item in page.items:
            if given >= ctx.export_max_items:
                return
            given += 1
            yield item
        if page.cursor is None:
            return
        _, page = await _page(ctx, job, source, filters, PAGE_MAX, page.cursor)


def csv_cell(value: Any) -> str:
    """A CSV cell: scalars as text, lists and objects as JSON; text that a spreadsheet
    would take for a formula (= + - @, tab, CR first) gets a leading '."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return "'" + text if text.startswith(_FORMULA_START) else text


def _fixed(item: BrowsedItem) -> dict[str, Any]:
    return {"key": item.key, "url": item.url, "stored_at": item.to_json()["stored_at"]}


async def _csv_columns(items: AsyncIterator[BrowsedItem]) -> list[tuple[str, str]]:
    """(column title, document field) of every field in *items*, first seen first; a
    field named as a fixed column is titled ``document.NAME`` unless it always equals
    that column."""
    seen: dict[str, bool] = {}  # field -> differs from the fixed column of its name
    async for item in items:
        fixed = _fixed(item)
        for name, value in item.document.items():
            if name not in seen:
                if len(seen) >= CSV_FIELDS_MAX:
                    continue
                seen[name] = False
            if name in fixed and not seen[name] and value != fixed[name]:
                seen[name] = True
    return [
        (f"document.{name}" if name in CSV_FIXED else name, name)
        for name, differs in seen.items()
        if name not in CSV_FIXED or differs
    ]


def _csv_text(rows: list[list[str]]) -> bytes:
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return out.getvalue().encode()


@router.get(
    "/export",
    summary="the job's items (filtered as a page is) as JSON lines or CSV, newest first",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-ndjson": {}, "text/csv": {}}}},
)
async def export(
    job: JobPath,
    ctx: Ctx,
    _: Viewer,
    format: Literal["jsonl", "csv"] = "jsonl",
    source: SourceQuery = "sql",
    q: QQuery = None,
    field: FieldQuery = None,
    value: ValueQuery = None,
) -> StreamingResponse:
    """At most CRAWLFLEET_MANAGER_EXPORT_MAX_ITEMS items (the ``X-Export-Max-Items``
    header). JSON lines: one item a line, as a page gives it. CSV: ``key,url,stored_at``
    then the documents' fields (one column each, first seen first; lists and objects
    as JSON). A store that fails mid-way cuts the download short (it is not complete)."""
    ctx.keys(job)
    filters = _filters(q, field, value)
    first = (await _page(ctx, job, source, filters, PAGE_MAX, None))[1]  # errors: answered
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", job)[:100]
    headers = {
        "Content-Disposition": f'attachment; filename="{safe}-items.{format}"',
        "Cache-Control": "no-store",
        "X-Export-Max-Items": str(ctx.export_max_items),
    }

    async def jsonl() -> AsyncIterator[bytes]:
        async for item in _every_item(ctx, job, source, filters, first):
            yield (json.dumps(item.to_json(), ensure_ascii=False) + "\n").encode()

    async def csv_rows() -> AsyncIterator[bytes]:
        columns = await _csv_columns(_every_item(ctx, job, source, filters, first))
        # the header too: field names come from the crawled pages' items
        yield _csv_text([[*CSV_FIXED, *(csv_cell(title) for title, _ in columns)]])
        batch: list[list[str]] = []
        async for item in _every_item(ctx, job, source, filters, first):
            fixed = _fixed(item)
            row = [csv_cell(fixed[name]) for name in CSV_FIXED]
            row += [csv_cell(item.document.get(name)) for _, name in columns]
            batch.append(row)
            if len(batch) >= PAGE_MAX:
                yield _csv_text(batch)
                batch = []
        if batch:
            yield _csv_text(batch)

    if format == "csv":
        return StreamingResponse(csv_rows(), media_type="text/csv; charset=utf-8", headers=headers)
    return StreamingResponse(jsonl(), media_type="application/x-ndjson", headers=headers)
