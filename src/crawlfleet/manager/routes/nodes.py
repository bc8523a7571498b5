"""``/api/v1/nodes``: every node of every job with its live figures, and control of one
node. A node id is unique within its job; control finds the job(s) the node is on."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException
from starlette.responses import Response

from crawlfleet.fleet.control import await_acks, send_command, valid_node_id
from crawlfleet.fleet.jobs import list_jobs
from crawlfleet.fleet.snapshot import JOBS_MAX, job_nodes
from crawlfleet.manager.auth import Ctx, Operator, Viewer
from crawlfleet.manager.context import ManagerContext
from crawlfleet.manager.routes.jobs import sent_json
from crawlfleet.manager.routes.models import NodeControlBody
from crawlfleet.manager.shared import Made

__all__ = ["node_rows", "nodes_figure", "router"]

router = APIRouter(prefix="/api/v1/nodes", tags=["nodes"])


async def node_rows(ctx: ManagerContext) -> list[dict[str, Any]]:
    """Every node of every job (at most JOBS_MAX jobs), by job then node id."""
    jobs = (await list_jobs(ctx.redis, ctx.key_prefix))[:JOBS_MAX]
    each = await job_nodes(ctx.redis, [ctx.keys(job) for job in jobs])
    out = []
    for job, nodes in zip(jobs, each, strict=True):
        out += [{"job": job, "node": node, **info} for node, info in sorted(nodes.items())]
    return out


async def nodes_figure(ctx: ManagerContext) -> Made:
    """``{"nodes": node_rows}``, made once for everyone (crawlfleet.manager.shared)."""

    async def make() -> dict[str, Any]:
        return {"nodes": await node_rows(ctx)}

    return await ctx.figures.get("nodes", make)


@router.get(
    "",
    summary="every node of every job: alive or not, and its live figures",
    response_model=dict[str, Any],
)
async def nodes(ctx: Ctx, _: Viewer) -> Response:
    return (await nodes_figure(ctx)).response()


@router.post("/{node}/control", summary="pause, resume, drain, stop or size one node")
async def control(node: str, body: NodeControlBody, ctx: Ctx, token: Operator) -> dict[str, Any]:
    valid_node_id(node)
    jobs = [body.job] if body.job else (await list_jobs(ctx.redis, ctx.key_prefix))[:JOBS_MAX]
    on = [job for job in jobs if await ctx.redis.zscore(ctx.keys(job).nodes, node) is not None]
    if not on:
        raise HTTPException(404, f"no node {node!r} on {body.job or 'any job'}")
    if len(on) > 1:
        raise HTTPException(400, f"node {node!r} is on jobs {', '.join(on)}: name one in 'job'")
    sent = await send_command(ctx.redis, ctx.key_prefix, on[0], body.command, body.value, node=node)
    detail = {"command": body.command, "value": body.value, "node": node}
    await ctx.record(token.name, "node.control", on[0], detail)
    if body.wait_seconds:
        await await_acks(ctx.redis, ctx.key_prefix, sent, body.wait_seconds)
    return {"sent": sent_json(sent)}
