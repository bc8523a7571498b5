"""``/api/v1/jobs/{job}/errors``: the job's error registry (requests that failed for
good on its nodes, from the state DB), its counts, and re-crawls (``crawlfleet errors``
is the same on the command line)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from crawlfleet.fleet.errors import recrawl_errors
from crawlfleet.fleet.snapshot import snapshot
from crawlfleet.manager.auth import Ctx, Operator, Viewer
from crawlfleet.manager.routes.models import ErrorReason, JobPath, RecrawlBody
from crawlfleet.state.errors import error_stats, list_errors
from crawlfleet.state.url import state_db_identity

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/jobs/{job}/errors", tags=["errors"])

State = Literal["open", "queued", "resolved", "all"]


@router.get("", summary="the job's failed requests, the latest failure first")
async def errors(
    job: JobPath,
    ctx: Ctx,
    _: Viewer,
    reason: ErrorReason | None = None,
    state: State = "open",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
) -> dict[str, Any]:
    ctx.keys(job)
    rows = await ctx.in_db(
        list_errors,
        ctx.db,
        job,
        reason=reason,
        state=None if state == "all" else state,
        limit=limit,
        offset=offset,
    )
    return {"job": job, "errors": rows}


@router.get("/stats", summary="counts of the job's failed requests by state, reason, site")
async def stats(job: JobPath, ctx: Ctx, _: Viewer) -> dict[str, Any]:
    """The counts, the state DB they come from (``state_db``) and the live nodes of the
    job that write their failures to another one (``nodes_elsewhere``: node -> where):
    their failures are not counted here."""
    counts = await ctx.in_db(error_stats, ctx.db, job)
    mine = state_db_identity(ctx.db.engine.url.render_as_string(hide_password=False))
    snap = await snapshot(ctx.redis, ctx.keys(job), ctx.limits)
    elsewhere = {
        node: str(info["state_db"])
        for node, info in sorted(snap.nodes.items())
        if info["alive"] and info.get("state_db") not in (None, mine)
    }
    return {**counts, "state_db": mine, "nodes_elsewhere": elsewhere}


@router.post("/recrawl", summary="queue the job's open failures again (of one reason)")
async def recrawl(job: JobPath, body: RecrawlBody, ctx: Ctx, token: Operator) -> dict[str, Any]:
    result = await recrawl_errors(ctx.frontier(job), ctx.db, reason=body.reason, limit=body.limit)
    detail = {"reason": body.reason, **result.as_dict()}
    await ctx.record(token.name, "job.errors.recrawl", job, detail)
    return {"job": job, **result.as_dict()}
