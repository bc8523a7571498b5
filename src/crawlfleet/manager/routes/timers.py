"""``/api/v1/timers``: cron expressions that run, pause, resume, drain or stop a job,
fired once however many managers run (see :mod:`crawlfleet.state.timers`), each due
time recorded (fired, failed or missed)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query

from crawlfleet.manager.auth import Ctx, Operator, Viewer
from crawlfleet.manager.routes.models import NamePath, TimerBody, TimerPatch
from crawlfleet.state.timers import create_timer, delete_timer, list_fires, list_timers, set_enabled

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/timers", tags=["timers"])


@router.post("", summary="a timer: a cron expression and what it does to a job")
async def create(body: TimerBody, ctx: Ctx, token: Operator) -> dict[str, Any]:
    ctx.keys(body.job)  # a valid job name
    if (body.action == "run") != (body.run is not None):
        raise HTTPException(400, "'run' (spider, project, nodes...) goes with action run, only")
    params = body.run.model_dump() if body.run is not None else {}
    timer = await ctx.in_db(
        create_timer, ctx.db, body.name, body.job, body.action, body.cron, params, token.name
    )
    await ctx.record(token.name, "timer.create", body.job, timer)
    return timer


@router.get("", summary="every timer, with its next due time (UTC)")
async def timers(ctx: Ctx, _: Viewer) -> dict[str, Any]:
    return {"timers": await ctx.in_db(list_timers, ctx.db)}


@router.patch("/{name}", summary="enable or disable a timer")
async def patch(name: NamePath, body: TimerPatch, ctx: Ctx, token: Operator) -> dict[str, Any]:
    timer = await ctx.in_db(set_enabled, ctx.db, name, body.enabled)
    detail = {"name": name, "enabled": body.enabled}
    await ctx.record(token.name, "timer.enable", timer["job"], detail)
    return timer


@router.delete("/{name}", summary="delete a timer and its history")
async def remove(name: NamePath, ctx: Ctx, token: Operator) -> dict[str, Any]:
    return await ctx.remove(token.name, "timer.delete", delete_timer, name)


@router.get("/{name}/fires", summary="a timer's due times: fired, failed or missed")
async def fires(
    name: NamePath, ctx: Ctx, _: Viewer, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> dict[str, Any]:
    return {"name": name, "fires": await ctx.in_db(list_fires, ctx.db, name, limit=limit)}
