"""Scrapyd nodes: register them (``/api/v1/scrapyd``), deploy a project's egg to them
(``/api/v1/deploy``), start crawlfleet nodes of a job on them (``/api/v1/jobs/{job}/run``),
follow, cancel and read those processes (``/api/v1/jobs/{job}/processes``)."""

from __future__ import annotations

import asyncio
import tempfile
import time
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import AfterValidator

from crawlfleet.manager.auth import Admin, Ctx, Operator, Viewer
from crawlfleet.manager.context import ManagerContext
from crawlfleet.manager.launch import cpu_by_host, scrapyd_nodes, start_processes
from crawlfleet.manager.routes.models import (
    CancelBody,
    IdPath,
    JobPath,
    NamePath,
    RunBody,
    ScrapydBody,
    plain_name,
)
from crawlfleet.manager.scrapyd import ScrapydClient, ScrapydError, loads, log_levels
from crawlfleet.state.scrapyd import (
    ScrapydInfo,
    add_scrapyd,
    get_process,
    list_processes,
    list_scrapyd,
    remove_scrapyd,
    scrapyd_url,
    set_process_state,
)

__all__ = ["router"]

router = APIRouter(tags=["scrapyd"])
EGG = {"schema": {"type": "string", "format": "binary"}}
#: Seconds given to a process to stop after SIGKILL before the cancel is reported failed.
KILL_WAIT_SECONDS = 5.0


@router.post("/api/v1/scrapyd", summary="register a Scrapyd (its URL and optional basic auth)")
async def register(body: ScrapydBody, ctx: Ctx, token: Admin) -> dict[str, Any]:
    if body.check:
        url, user, password = scrapyd_url(body.url)  # ConfigError: 400
        probe = ScrapydInfo(body.name, url, body.username or user, body.password or password)
        async with ScrapydClient(probe) as client:
            try:
                await client.daemonstatus()
            except ScrapydError as exc:
                raise HTTPException(400, f"{exc}; not registered") from None
    node = await ctx.in_db(add_scrapyd, ctx.db, body.name, body.url, body.username, body.password)
    await ctx.record(token.name, "scrapyd.add", None, node.public())
    return node.public()


@router.get("/api/v1/scrapyd", summary="the Scrapyd nodes and what each is doing now")
async def list_nodes(ctx: Ctx, _: Viewer) -> dict[str, Any]:
    nodes = await ctx.in_db(list_scrapyd, ctx.db)
    now = {load.name: load for load in await loads(nodes, await cpu_by_host(ctx))}
    out = []
    for node in nodes:
        load = now[node.name]
        out.append(
            {
                **node.public(),
                "reachable": load.reachable,
                "error": load.error or None,
                "running": load.running,
                "pending": load.pending,
                "node_name": load.node_name or None,
                "cpu_percent": load.cpu_percent,
            }
        )
    return {"scrapyd": out}


@router.get(
    "/api/v1/scrapyd/projects",
    summary="the projects deployed on the Scrapyd nodes, each with its spiders and nodes",
)
async def projects(ctx: Ctx, _: Viewer) -> dict[str, Any]:
    """What a run may start: every project some Scrapyd holds, its spiders (as the
    newest version on each node lists them) and the nodes that hold it; a node that
    does not answer is listed in ``errors`` (the others still count)."""
    nodes = await ctx.in_db(list_scrapyd, ctx.db)

    async def one(node: ScrapydInfo) -> dict[str, list[str]]:
        async with ScrapydClient(node) as client:
            names = await client.listprojects()
            spiders = await asyncio.gather(*(client.listspiders(p) for p in names))
            return dict(zip(names, spiders, strict=True))

    found: dict[str, dict[str, Any]] = {}
    errors: list[dict[str, str]] = []
    for node, held in zip(
        nodes, await asyncio.gather(*(one(n) for n in nodes), return_exceptions=True), strict=True
    ):
        if isinstance(held, ScrapydError):
            errors.append({"scrapyd": node.name, "error": str(held)})
            continue
        if isinstance(held, BaseException):
            raise held
        for project, spiders in held.items():
            entry = found.setdefault(project, {"project": project, "spiders": [], "scrapyd": []})
            entry["spiders"] = sorted({*entry["spiders"], *spiders})
            entry["scrapyd"].append(node.name)
    return {"projects": [found[p] for p in sorted(found)], "errors": errors}


@router.delete("/api/v1/scrapyd/{name}", summary="forget a Scrapyd")
async def unregister(name: NamePath, ctx: Ctx, token: Admin) -> dict[str, Any]:
    return await ctx.remove(token.name, "scrapyd.remove", remove_scrapyd, name)


@router.post(
    "/api/v1/deploy",
    summary="upload a project's egg (the request body) to Scrapyd nodes",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    },
)
async def deploy(
    request: Request,
    ctx: Ctx,
    token: Admin,
    project: Annotated[
        str,
        Query(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.-]+$"),
        AfterValidator(plain_name),
    ],
    version: Annotated[
        str,
        Query(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.+-]+$"),
        AfterValidator(plain_name),
    ],
    nodes: Annotated[str, Query(description="'all' or names, comma-separated")] = "all",
) -> dict[str, Any]:
    targets = await scrapyd_nodes(ctx, nodes)
    # the egg goes to a temporary file as it arrives (the edge bounds it at
    # CRAWLFLEET_MANAGER_MAX_EGG), and each Scrapyd reads its own handle on it
    with tempfile.NamedTemporaryFile(prefix="crawlfleet-egg-") as spool:
        async for chunk in request.stream():
            spool.write(chunk)
        spool.flush()
        if not spool.tell():
            raise HTTPException(
                400, "the request body must be the egg (crawlfleet deploy builds it)"
            )

        async def one(node: ScrapydInfo) -> dict[str, Any]:
            with open(spool.name, "rb") as egg:
                async with ScrapydClient(node) as client:
                    try:
                        body = await client.addversion(project, version, egg)
                        return {"scrapyd": node.name, "ok": True, "spiders": body.get("spiders")}
                    except ScrapydError as exc:
                        return {"scrapyd": node.name, "ok": False, "error": str(exc)}

        results = list(await asyncio.gather(*(one(n) for n in targets)))
    detail = {"project": project, "version": version, "results": results}
    await ctx.record(token.name, "deploy", None, detail)
    if not any(r["ok"] for r in results):
        raise HTTPException(502, "; ".join(r["error"] for r in results))
    return {"project": project, "version": version, "results": results}


@router.post("/api/v1/jobs/{job}/run", summary="start crawlfleet nodes of the job through Scrapyd")
async def run(job: JobPath, body: RunBody, ctx: Ctx, token: Operator) -> dict[str, Any]:
    return await start_processes(ctx, job, body, token.name)


@router.get("/api/v1/jobs/{job}/processes", summary="nodes started for the job through Scrapyd")
async def processes(job: JobPath, ctx: Ctx, _: Viewer) -> dict[str, Any]:
    ctx.keys(job)
    return {"job": job, "processes": await ctx.in_db(list_processes, ctx.db, job)}


async def _process(ctx: ManagerContext, job: str, pid: int) -> tuple[dict[str, Any], ScrapydInfo]:
    process = await ctx.in_db(get_process, ctx.db, job, pid)
    if process is None:
        raise HTTPException(404, f"job {job} has no process {pid}")
    nodes = {n.name: n for n in await ctx.in_db(list_scrapyd, ctx.db)}
    if process["scrapyd"] not in nodes:
        raise HTTPException(404, f"Scrapyd {process['scrapyd']} is no longer registered")
    return process, nodes[process["scrapyd"]]


@router.post(
    "/api/v1/jobs/{job}/processes/{pid}/cancel",
    summary="stop a process: TERM, then KILL after the grace period, verified",
)
async def cancel(
    job: JobPath, pid: IdPath, body: CancelBody, ctx: Ctx, token: Operator
) -> dict[str, Any]:
    process, node = await _process(ctx, job, pid)
    project, sid = process["project"], process["scrapyd_job"]
    async with ScrapydClient(node) as client:  # ScrapydError: 502
        state = await client.status(project, sid)
        note = ""
        if state in ("pending", "running"):
            await client.cancel(project, sid, "TERM")
            state = await _wait_stopped(client, project, sid, body.grace_seconds)
            note = "stopped on TERM"
            if state == "running":
                await client.cancel(project, sid, "KILL")
                state = await _wait_stopped(client, project, sid, KILL_WAIT_SECONDS)
                note = (
                    f"killed: still running {body.grace_seconds:g} s after TERM (a node "
                    "stopping finishes its requests in flight and writes its items first; "
                    "a longer grace_seconds lets it close by itself)"
                )
    final = {
        None: ("lost", "Scrapyd no longer knows it"),
        "running": ("cancel_failed", "still running after TERM and KILL"),
    }.get(state, ("cancelled", note or f"was {state}"))
    if state == "finished" and not note:  # it had ended by itself before the cancel
        final = (
            (process["state"], process["note"])
            if process["state"] not in ("pending", "running")
            else ("finished", "had finished before the cancel")
        )
    await ctx.in_db(set_process_state, ctx.db, pid, final[0], final[1])
    detail = {"process": pid, "state": final[0], "note": final[1]}
    await ctx.record(token.name, "process.cancel", job, detail)
    return {"id": pid, "state": final[0], "note": final[1]}


async def _wait_stopped(
    client: ScrapydClient, project: str, sid: str, seconds: float
) -> str | None:
    deadline = time.monotonic() + seconds
    while True:
        state = await client.status(project, sid)
        if (state != "running" and state != "pending") or time.monotonic() >= deadline:
            return state
        await asyncio.sleep(0.25)


@router.get("/api/v1/jobs/{job}/processes/{pid}/log", summary="the end of a process's log")
async def log(
    job: JobPath,
    pid: IdPath,
    ctx: Ctx,
    _: Viewer,
    tail_bytes: Annotated[int, Query(ge=1, le=10 * 2**20)] = 65536,
) -> dict[str, Any]:
    process, node = await _process(ctx, job, pid)
    async with ScrapydClient(node) as client:  # ScrapydError: 502
        text = await client.log(
            process["project"], process["spider"], process["scrapyd_job"], tail_bytes
        )
    return {"id": pid, "state": process["state"], "levels": log_levels(text), "text": text}
