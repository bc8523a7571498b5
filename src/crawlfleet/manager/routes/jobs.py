"""``/api/v1/jobs``: the jobs of the fleet's Redis, their figures, and what steers them
(seeds, control, limits, reset). Reads need a viewer token, changes an operator's; every
change is kept in the state DB's audit (``/api/v1/jobs/{job}/events``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from starlette.responses import Response

from crawlfleet.fleet.control import Sent, await_acks, send_command
from crawlfleet.fleet.jobs import list_jobs, require_job, reset_job, runs_total
from crawlfleet.fleet.limits import read_limits, set_limits, unset_limits
from crawlfleet.fleet.seeds import SeedResult, queue_seeds, seed_batches
from crawlfleet.fleet.snapshot import JOBS_MAX, JobSnapshot, snapshots
from crawlfleet.manager.auth import Ctx, Operator, Viewer
from crawlfleet.manager.context import ManagerContext
from crawlfleet.manager.routes.models import ControlBody, JobPath, LimitsBody, ResetBody, SeedsBody
from crawlfleet.manager.shared import Made
from crawlfleet.state.events import list_events
from crawlfleet.state.runs import list_runs

__all__ = [
    "fleet_figure",
    "job_figure",
    "job_view",
    "job_views",
    "live_figures",
    "router",
    "sent_json",
    "site_figures",
]

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])


def job_state(snap: JobSnapshot, runs: int) -> str:
    """paused, draining or stopped (as commanded); running (live nodes); waiting (work
    queued, no node); finished (no work, nodes ran); idle (nothing yet)."""
    commanded = snap.job_control.get("state", "running")
    if commanded != "running":
        return commanded
    if snap.live_nodes:
        return "running"
    if snap.queued or snap.leased:
        return "waiting"
    return "finished" if runs else "idle"


def job_view(snap: JobSnapshot, *, full: bool) -> dict[str, Any]:
    """What the API and the dashboard show of a job, from its snapshot (read with its
    runs): state, counters and run totals; *full* adds its nodes, per-site figures and
    the runs of its nodes."""
    runs = snap.runs or {}
    view = snap.to_json()
    view["state"] = job_state(snap, len(runs))
    view["counters"] = snap.counters
    view["runs_total"] = runs_total(runs)
    view["live"] = live_figures(snap)
    if full:
        view["runs"] = runs
        view["site_live"] = site_figures(snap)
    else:
        for detail in ("nodes", "top_sites", "backoff_ms", "robots_delay_ms", "site_limits_per_s"):
            view.pop(detail, None)
    return view


async def job_views(ctx: ManagerContext, jobs: list[str], *, full: bool) -> list[dict[str, Any]]:
    """:func:`job_view` of each of *jobs*, read together (as many round trips for many
    jobs as for one, :func:`snapshots`)."""
    keys = [ctx.keys(job) for job in jobs]
    return [
        job_view(snap, full=full)
        for snap in await snapshots(ctx.redis, keys, ctx.limits, runs=True)
    ]


def live_figures(snap: JobSnapshot) -> dict[str, float | int]:
    """Sums over the job's live nodes: pages and items per second, pages, items and
    errors of their runs so far."""
    out: dict[str, float | int] = {
        "pages_per_second": 0.0,
        "items_per_second": 0.0,
        "pages": 0,
        "items": 0,
        "errors": 0,
    }
    for info in snap.nodes.values():
        if not info["alive"]:
            continue
        out["pages_per_second"] += _number(info.get("pages_per_min")) / 60.0
        out["items_per_second"] += _number(info.get("items_per_min")) / 60.0
        out["pages"] += int(_number(info.get("pages")))
        out["items"] += int(_number(info.get("items")))
        errors = info.get("errors")
        if isinstance(errors, dict):
            out["errors"] += int(sum(_number(v) for v in errors.values()))
    out["pages_per_second"] = round(out["pages_per_second"], 2)
    out["items_per_second"] = round(out["items_per_second"], 2)
    return out


def site_figures(snap: JobSnapshot) -> dict[str, dict[str, float | int]]:
    """Per site, summed over the job's live nodes (each publishes its busiest sites):
    leases held and requests done per second over the nodes' telemetry window."""
    out: dict[str, dict[str, float | int]] = {}
    for info in snap.nodes.values():
        sites = info.get("sites") if info["alive"] else None
        if not isinstance(sites, dict):
            continue
        for site, figures in sites.items():
            if not isinstance(figures, dict):
                continue
            mine = out.setdefault(str(site), {"leased": 0, "per_second": 0.0})
            mine["leased"] += int(_number(figures.get("leased")))
            mine["per_second"] += _number(figures.get("done_per_min")) / 60.0
    for mine in out.values():
        mine["per_second"] = round(mine["per_second"], 2)
    return out


def _number(value: Any) -> float:
    """A figure a node published, 0 for what is not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    return float(value)


def sent_json(sent: list[Sent]) -> list[dict[str, Any]]:
    return [
        {
            "job": s.job,
            "command": s.command,
            "value": s.value,
            "seq": s.seq,
            "live_nodes": s.live,
            "targets": s.targets,
            "acked": s.acked,
            "pending": s.pending,
        }
        for s in sent
    ]


async def fleet_figure(ctx: ManagerContext) -> Made:
    """Every job's view (not full), as ``GET /api/v1/jobs`` and the live streams give it:
    made once for everyone (:mod:`crawlfleet.manager.shared`)."""

    async def make() -> dict[str, Any]:
        names = (await list_jobs(ctx.redis, ctx.key_prefix))[:JOBS_MAX]
        return {"jobs": await job_views(ctx, names, full=False)}

    return await ctx.figures.get("fleet", make)


async def job_figure(ctx: ManagerContext, job: str) -> Made:
    """*job*'s full view, made once for everyone."""

    async def make() -> dict[str, Any]:
        return (await job_views(ctx, [job], full=True))[0]

    return await ctx.figures.get(f"job:{job}", make)


@router.get(
    "",
    summary="every job of the fleet's Redis, with its figures",
    response_model=dict[str, Any],
)
async def jobs(ctx: Ctx, _: Viewer) -> Response:
    return (await fleet_figure(ctx)).response()


@router.get(
    "/{job}",
    summary="one job: queues, leases, nodes, rate, ETA, per-site figures",
    response_model=dict[str, Any],
)
async def job(job: JobPath, ctx: Ctx, _: Viewer) -> Response:
    # the fleet's figure, if one is at hand, knows the job without asking Redis
    fleet = ctx.figures.peek("fleet")
    if fleet is None or not any(j["job"] == job for j in fleet.value["jobs"]):
        await require_job(ctx.redis, ctx.key_prefix, job)  # a job newer than the figures?
    return (await job_figure(ctx, job)).response()


@router.post("/{job}/seeds", summary="queue seed URLs (or JSON seed entries)")
async def seeds(
    job: JobPath,
    body: SeedsBody,
    ctx: Ctx,
    token: Operator,
) -> dict[str, Any]:
    frontier = ctx.frontier(job)  # a job is made by its first seeds
    result = SeedResult()
    batches = seed_batches(body.seeds, result)
    if batches is None:
        first = result.invalid[0]
        raise HTTPException(400, f"no valid seed: entry {first[0]}: {first[2]}")
    await queue_seeds(frontier, batches, ctx.frontier_config.site_key, result)
    await ctx.record(
        token.name,
        "job.seeds",
        job,
        {"queued": result.queued, "duplicates": result.duplicates, "invalid": result.invalid_count},
    )
    return {"job": job, **result.as_dict()}


@router.post("/{job}/control", summary="pause, resume, drain or stop the job's nodes")
async def control(
    job: JobPath,
    body: ControlBody,
    ctx: Ctx,
    token: Operator,
) -> dict[str, Any]:
    ctx.keys(job)  # a valid name, else 400
    sent = await send_command(
        ctx.redis, ctx.key_prefix, job, body.command, body.value, node=body.node
    )
    detail = {"command": body.command, "value": body.value, "node": body.node}
    await ctx.record(token.name, "job.control", job, detail)
    if body.wait_seconds:
        await await_acks(ctx.redis, ctx.key_prefix, sent, body.wait_seconds)
    return {"sent": sent_json(sent)}


@router.get("/{job}/limits", summary="the job's own run-time rate limits")
async def limits(
    job: JobPath,
    ctx: Ctx,
    _: Viewer,
) -> dict[str, Any]:
    await ctx.known_frontier(job)
    return {"job": job, "limits": await read_limits(ctx.redis, ctx.key_prefix, job)}


@router.put(
    "/{job}/limits",
    summary="give the job its own budget for these sites (each pattern's; others kept)",
)
async def put_limits(
    job: JobPath,
    body: LimitsBody,
    ctx: Ctx,
    token: Operator,
) -> dict[str, Any]:
    name = ctx.keys(job).job  # before a job starts too
    now = await set_limits(ctx.redis, ctx.key_prefix, name, body.limits)
    await ctx.record(token.name, "job.limits.set", job, body.limits)
    return {"job": job, "limits": now}


@router.delete("/{job}/limits", summary="lift the job's own limits (the given patterns, or all)")
async def delete_limits(
    job: JobPath,
    ctx: Ctx,
    token: Operator,
    pattern: Annotated[list[str] | None, Query()] = None,
) -> dict[str, Any]:
    await ctx.known_frontier(job)
    now = await unset_limits(ctx.redis, ctx.key_prefix, job, pattern)
    detail = {"patterns": pattern if pattern is not None else "all"}
    await ctx.record(token.name, "job.limits.unset", job, detail)
    return {"job": job, "limits": now}


@router.post("/{job}/reset", summary="delete the job's shared state (refused while nodes live)")
async def reset(
    job: JobPath,
    body: ResetBody,
    ctx: Ctx,
    token: Operator,
) -> dict[str, Any]:
    frontier = await ctx.known_frontier(job)
    result = await reset_job(
        frontier, force=body.force, keep_limits=body.keep_limits, force_hint='"force": true'
    )
    detail = {"force": body.force, "keep_limits": body.keep_limits, "deleted": result.deleted}
    await ctx.record(token.name, "job.reset", job, detail)
    return {
        "job": job,
        "deleted": result.deleted,
        "unstored_items": result.unstored_items,
        "kept_limits": result.kept_limits,
    }


@router.get("/{job}/runs", summary="the job's runs (start, finish, nodes, figures), newest first")
async def runs(
    job: JobPath,
    ctx: Ctx,
    _: Viewer,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> dict[str, Any]:
    ctx.keys(job)
    return {"job": job, "runs": await ctx.in_db(list_runs, ctx.db, job, limit=limit)}


@router.get("/{job}/events", summary="changes made to the job through the manager, newest first")
async def events(
    job: JobPath,
    ctx: Ctx,
    _: Viewer,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    ctx.keys(job)
    return {"job": job, "events": await ctx.in_db(list_events, ctx.db, job=job, limit=limit)}
