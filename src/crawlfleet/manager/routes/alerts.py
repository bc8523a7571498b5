"""``/api/v1/alerts``: alert rules (metric, operator, threshold, duration, webhook), the
alerts they raised and each delivery attempt."""

from __future__ import annotations

import math
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query

from crawlfleet.manager.alerts import METRICS
from crawlfleet.manager.auth import Admin, Ctx, Viewer
from crawlfleet.manager.routes.models import AlertRuleBody, NamePath
from crawlfleet.state.alerts import create_rule, delete_rule, list_alerts, list_rules

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/alerts", tags=["alerts"])


@router.get("/metrics", summary="what an alert rule can watch")
async def metrics(_: Viewer) -> dict[str, Any]:
    return {"metrics": {name: doc for name, (doc, _fn) in METRICS.items()}}


@router.post("/rules", summary="a rule; its signing secret is in the answer, once")
async def create(body: AlertRuleBody, ctx: Ctx, token: Admin) -> dict[str, Any]:
    if body.job is not None:
        ctx.keys(body.job)
    if not math.isfinite(body.threshold):
        raise HTTPException(400, "threshold must be a finite number")
    rule, secret = await ctx.in_db(
        create_rule,
        ctx.db,
        name=body.name,
        job=body.job,
        metric=body.metric,
        op=body.op,
        threshold=body.threshold,
        for_seconds=body.for_seconds,
        webhook_url=body.webhook,
        secret=body.secret,
        actor=token.name,
        metrics=tuple(METRICS),
    )
    await ctx.record(token.name, "alert.create", body.job, rule)
    return {**rule, "secret": secret}


@router.get("/rules", summary="the alert rules (webhooks shown as their host only)")
async def rules(ctx: Ctx, _: Viewer) -> dict[str, Any]:
    return {"rules": await ctx.in_db(list_rules, ctx.db)}


@router.delete("/rules/{name}", summary="delete a rule, its alerts and their deliveries")
async def remove(name: NamePath, ctx: Ctx, token: Admin) -> dict[str, Any]:
    return await ctx.remove(token.name, "alert.delete", delete_rule, name)


@router.get("", summary="alerts, newest first, with every delivery attempt")
async def alerts(
    ctx: Ctx, _: Viewer, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> dict[str, Any]:
    return {"alerts": await ctx.in_db(list_alerts, ctx.db, limit=limit)}
