"""``/api/v1/limits``: the fleet's run-time rate limits (``crawlfleet limits --fleet``).
They override ``CRAWLFLEET_RATE_LIMITS`` on every node of every job; a site they cover
has one budget that every job shares (a job's own limits: ``/api/v1/jobs/{job}/limits``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from crawlfleet.fleet.limits import read_limits, set_limits, unset_limits
from crawlfleet.manager.auth import Ctx, Operator, Viewer
from crawlfleet.manager.routes.models import LimitsBody

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/limits", tags=["limits"])


@router.get("", summary="the fleet's run-time rate limits (every job shares them)")
async def fleet_limits(ctx: Ctx, _: Viewer) -> dict[str, Any]:
    return {"limits": await read_limits(ctx.redis, ctx.key_prefix, None)}


@router.put("", summary="set fleet rate limits (each pattern's; others kept)")
async def put_fleet_limits(body: LimitsBody, ctx: Ctx, token: Operator) -> dict[str, Any]:
    now = await set_limits(ctx.redis, ctx.key_prefix, None, body.limits)
    await ctx.record(token.name, "fleet.limits.set", None, body.limits)
    return {"limits": now}


@router.delete("", summary="lift fleet rate limits (the given patterns, or all)")
async def delete_fleet_limits(
    ctx: Ctx,
    token: Operator,
    pattern: Annotated[list[str] | None, Query()] = None,
) -> dict[str, Any]:
    now = await unset_limits(ctx.redis, ctx.key_prefix, None, pattern)
    detail = {"patterns": pattern if pattern is not None else "all"}
    await ctx.record(token.name, "fleet.limits.unset", None, detail)
    return {"limits": now}
