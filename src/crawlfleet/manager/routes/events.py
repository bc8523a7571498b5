"""``/api/v1/events``: the audit of changes made through the manager."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from crawlfleet.manager.auth import Ctx, Viewer
from crawlfleet.state.events import list_events

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/events", tags=["events"])


@router.get("", summary="changes made through the manager (who, what, when), newest first")
async def events(
    ctx: Ctx, _: Viewer, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> dict[str, Any]:
    return {"events": await ctx.in_db(list_events, ctx.db, limit=limit)}
