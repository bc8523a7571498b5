"""``/api/v1/live``: server-sent events for the dashboard, one round a second.

Each round sends ``fleet`` (every job's view, as ``GET /api/v1/jobs`` gives it); with
``job=NAME`` also ``job`` (that job's full view, or ``{"job", "error"}``); with
``nodes=true`` also ``nodes`` (as ``GET /api/v1/nodes``). The first ``fleet`` carries
``history``: the manager's throughput points of the last hour. A stream ends after
``max_seconds`` (the browser's EventSource reconnects by itself) or as soon as its
token or session is no longer valid (checked every ``RECHECK_SECONDS``), with an
``end`` event. Every stream and request of a manager shares one round's figures, made
and rendered once (:mod:`crawlfleet.manager.shared`).
Redis not answering gives an ``unavailable`` event (not ``error``: that
name is the browser's own for a broken connection), and the stream goes on.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from crawlfleet.manager.auth import Ctx, Viewer, session_from
from crawlfleet.manager.context import ManagerContext
from crawlfleet.manager.routes.jobs import fleet_figure, job_figure
from crawlfleet.manager.routes.nodes import nodes_figure
from crawlfleet.manager.shared import Made
from crawlfleet.redis.connection import REDIS_FAILURES
from crawlfleet.state.tokens import authenticate

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/live", tags=["live"])

#: Seconds between two rounds of events.
ROUND_SECONDS = 1.0
#: Seconds between two checks that the stream's caller may still read.
RECHECK_SECONDS = 15.0


def event(name: str, data: Any) -> str:
    """One server-sent event (JSON data on one line)."""
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def made_event(name: str, made: Made) -> str:
    """A shared figure as an event (its JSON as made once for every stream)."""
    return f"event: {name}\ndata: {made.text}\n\n"


async def _allowed(request: Request, ctx: ManagerContext) -> bool:
    """Whether the stream's caller is still signed in / its token still active."""
    header = request.headers.get("authorization", "")
    if header[:7].lower() == "bearer ":
        return await ctx.in_db(authenticate, ctx.db, header[7:].strip()) is not None
    return await session_from(request) is not None


async def _round(
    ctx: ManagerContext, job: str | None, nodes: bool, first: bool
) -> AsyncIterator[str]:
    fleet = await fleet_figure(ctx)
    if first:
        yield event("fleet", {**fleet.value, "history": list(ctx.history)})
    else:
        yield made_event("fleet", fleet)
    if job is not None:
        if any(j["job"] == job for j in fleet.value["jobs"]):
            yield made_event("job", await job_figure(ctx, job))
        else:
            yield event("job", {"job": job, "error": f"no job {job!r} in this Redis"})
    if nodes:
        yield made_event("nodes", await nodes_figure(ctx))


@router.get(
    "",
    summary="server-sent events: the fleet, one job and the nodes, every second",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def live(
    request: Request,
    ctx: Ctx,
    _: Viewer,
    job: Annotated[str | None, Query(max_length=200)] = None,
    nodes: bool = False,
    max_seconds: Annotated[float, Query(gt=0, le=3600)] = 300.0,
) -> StreamingResponse:
    if job is not None:
        ctx.keys(job)  # a valid name, else 400

    async def stream() -> AsyncIterator[str]:
        yield "retry: 2000\n\n"
        start = time.monotonic()
        checked = start
        first = True
        while time.monotonic() - start < max_seconds:
            if await request.is_disconnected():
                return
            if time.monotonic() - checked >= RECHECK_SECONDS:
                checked = time.monotonic()
                if not await _allowed(request, ctx):
                    yield event("end", {"reason": "signed out or token revoked"})
                    return
            try:
                async for chunk in _round(ctx, job, nodes, first):
                    yield chunk
                first = False
            except REDIS_FAILURES as exc:
                yield event(
                    "unavailable", {"message": f"Redis did not answer ({type(exc).__name__})"}
                )
            await asyncio.sleep(ROUND_SECONDS)
        yield event("end", {"reason": "max_seconds"})

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
