"""Starting crawlfleet nodes of a job through Scrapyd: what ``POST /api/v1/jobs/{job}/run``
and a "run" timer do."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from crawlfleet.addon import check_given
from crawlfleet.exceptions import NotFound
from crawlfleet.fleet.jobs import list_jobs
from crawlfleet.fleet.snapshot import JOBS_MAX, job_nodes
from crawlfleet.manager.context import ManagerContext
from crawlfleet.manager.routes.models import RunBody
from crawlfleet.manager.scrapyd import ScrapydClient, ScrapydError, least_loaded, loads
from crawlfleet.redis.connection import redact
from crawlfleet.state.scrapyd import ScrapydInfo, list_scrapyd, record_process

__all__ = ["cpu_by_host", "process_settings", "scrapyd_nodes", "start_processes"]


async def cpu_by_host(ctx: ManagerContext) -> dict[str, float]:
    """Summed CPU (100 = one core) of the live crawlfleet nodes of each host."""
    cpu: dict[str, float] = {}
    jobs = (await list_jobs(ctx.redis, ctx.key_prefix))[:JOBS_MAX]
    for nodes in await job_nodes(ctx.redis, [ctx.keys(job) for job in jobs]):
        for info in nodes.values():
            value = info.get("cpu_percent")
            if info.get("alive") and isinstance(value, int | float) and info.get("host"):
                cpu[str(info["host"])] = cpu.get(str(info["host"]), 0.0) + float(value)
    return cpu


async def scrapyd_nodes(ctx: ManagerContext, wanted: str | list[str]) -> list[ScrapydInfo]:
    """The registered Scrapyd nodes named (or all: "all", "least-loaded"); NotFound
    naming an unknown one, or when none is registered."""
    nodes = await ctx.in_db(list_scrapyd, ctx.db)
    if wanted in ("all", "least-loaded"):
        if not nodes:
            raise NotFound("no Scrapyd registered (POST /api/v1/scrapyd)")
        return nodes
    by_name = {n.name: n for n in nodes}
    names = wanted if isinstance(wanted, list) else [w for w in wanted.split(",") if w]
    unknown = [n for n in names if n not in by_name]
    if unknown or not names:
        raise NotFound(f"no Scrapyd named {', '.join(unknown) or '(none given)'}")
    return [by_name[n] for n in names]


def process_settings(
    ctx: ManagerContext, job: str, body: RunBody, node: ScrapydInfo
) -> dict[str, str]:
    """The Scrapy settings of a process started on *node*: the run's own, the job and key
    prefix, and where the manager's Redis and state DB are, so that the node works on
    the manager's fleet and its failures reach the registry the manager shows. Neither
    URL is passed when it holds a password (Scrapyd would keep it in clear); the state
    DB goes as CRAWLFLEET_MANAGER_STATE_DB_URL (a project's own CRAWLFLEET_STATE_DB_URL
    wins over it), a SQLite one only to a Scrapyd on this machine, by its absolute path."""
    settings = dict(body.settings)
    settings.update({"CRAWLFLEET_JOB": job, "CRAWLFLEET_KEY_PREFIX": ctx.key_prefix})
    if "CRAWLFLEET_REDIS_URL" not in settings and redact(ctx.redis_url) == ctx.redis_url:
        settings["CRAWLFLEET_REDIS_URL"] = ctx.redis_url  # never one with a password
    state = ctx.db.engine.url
    if "CRAWLFLEET_STATE_DB_URL" not in settings and state.password is None:
        if state.get_backend_name() != "sqlite":
            url = state.render_as_string(hide_password=False)
            settings["CRAWLFLEET_MANAGER_STATE_DB_URL"] = url
        elif state.database not in (None, "", ":memory:") and _on_this_machine(node.url):
            path = Path(state.database).absolute()
            settings["CRAWLFLEET_MANAGER_STATE_DB_URL"] = f"sqlite:///{path}"
    return settings


def _on_this_machine(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host == "localhost" or host.startswith("127.") or host == "::1"


async def start_processes(
    ctx: ManagerContext, job: str, body: RunBody, actor: str
) -> dict[str, Any]:
    """Schedule the job's spider on the chosen Scrapyd nodes and keep each process;
    ScrapydError if none could be started (each failure is in the result otherwise)."""
    ctx.keys(job)  # ConfigError for a bad name
    check_given(body.settings)  # ConfigError for a wrong crawlfleet setting, sent nowhere
    nodes = await scrapyd_nodes(ctx, body.nodes)
    if body.nodes == "least-loaded":
        chosen = least_loaded(await loads(nodes, await cpu_by_host(ctx)), body.count)
        if not chosen:
            raise ScrapydError("no Scrapyd answers: nothing started")
    else:
        chosen = [n.name for n in nodes for _ in range(body.count)]
    by_name = {n.name: n for n in nodes}
    started, errors = [], []
    for name in chosen:
        settings = process_settings(ctx, job, body, by_name[name])
        async with ScrapydClient(by_name[name]) as client:
            try:
                sid = await client.schedule(body.project, body.spider, settings, body.args)
            except ScrapydError as exc:
                errors.append(str(exc))
                continue
        pid = await ctx.in_db(
            record_process, ctx.db, job, name, body.project, body.spider, sid, actor
        )
        started.append({"id": pid, "scrapyd": name, "scrapyd_job": sid})
    detail = {"spider": body.spider, "project": body.project, "started": started, "errors": errors}
    await ctx.record(actor, "job.run", job, detail)
    if not started:
        raise ScrapydError("; ".join(errors))
    return {"job": job, "started": started, "errors": errors}
