"""The manager's watch over the fleet: every ``CRAWLFLEET_MANAGER_WATCH_SECONDS`` it
opens a run for each job that has live nodes and none open, closes the open run of a job
whose nodes are all gone, with the figures its nodes left (their summaries), and follows
the processes it started through Scrapyd, fires the timers that are due and evaluates
the alert rules."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from crawlfleet.exceptions import CrawlfleetError
from crawlfleet.fleet.control import send_command
from crawlfleet.fleet.jobs import list_jobs, runs_total
from crawlfleet.fleet.snapshot import JOBS_MAX, JobSnapshot, snapshots
from crawlfleet.manager.alerts import evaluate
from crawlfleet.manager.context import ManagerContext
from crawlfleet.manager.launch import start_processes
from crawlfleet.manager.routes.models import RunBody
from crawlfleet.manager.scrapyd import ScrapydClient, ScrapydError
from crawlfleet.outage import Outage
from crawlfleet.redis.connection import REDIS_FAILURES
from crawlfleet.state.models import utcnow
from crawlfleet.state.runs import close_run, open_run, open_run_start, touch_run
from crawlfleet.state.scrapyd import list_processes, list_scrapyd, set_process_state
from crawlfleet.state.timers import claim, due_timers, due_times, next_due, record_fire

__all__ = [
    "fleet_snapshots",
    "note_history",
    "observe_processes",
    "observe_runs",
    "observe_timers",
    "run_state",
    "watch",
]

logger = logging.getLogger(__name__)

#: A due time this old when a manager sees it is missed, not fired late (a manager that
#: was down for hours must not start last night's crawl at noon).
MISFIRE_GRACE_SECONDS = 60.0
#: A Scrapyd that does not answer for this long: its pending and running processes are
#: marked lost (if it comes back with them still running, they stay lost in the history).
SCRAPYD_LOST_SECONDS = 120.0


def run_state(snap: JobSnapshot) -> str:
    """How a run ended, its nodes all gone: finished (no work left), lost (nodes that
    stopped heartbeating are still registered) or stopped (they left work queued)."""
    if snap.queued == 0 and snap.leased == 0:
        return "finished"
    return "lost" if snap.nodes else "stopped"


async def fleet_snapshots(ctx: ManagerContext) -> dict[str, JobSnapshot]:
    """Every job's snapshot now (at most JOBS_MAX jobs): read once per watch."""
    jobs = (await list_jobs(ctx.redis, ctx.key_prefix))[:JOBS_MAX]
    snaps = await snapshots(ctx.redis, [ctx.keys(job) for job in jobs], ctx.limits)
    return dict(zip(jobs, snaps, strict=True))


def note_history(ctx: ManagerContext, snaps: dict[str, JobSnapshot]) -> None:
    """One point of throughput history: each job's pages/s now (0 with no live node)."""
    if not snaps:
        return
    at = max(snap.now_ms for snap in snaps.values())
    jobs = {job: round(snap.pages_per_second or 0.0, 2) for job, snap in snaps.items()}
    ctx.history.append({"at": at, "jobs": jobs})


async def observe_runs(ctx: ManagerContext, snaps: dict[str, JobSnapshot]) -> None:
    """One look at every job of *snaps* (see the module docstring)."""
    for job, snap in snaps.items():
        alive = len(snap.live_nodes)
        started = await ctx.in_db(open_run_start, ctx.db, job)
        if alive and started is None:
            by = await _starter(ctx, job)
            if await ctx.in_db(open_run, ctx.db, job, nodes=alive, started_by=by):
                logger.info("job %s: run started (%d live nodes)", job, alive)
        elif alive:
            await ctx.in_db(touch_run, ctx.db, job, nodes=alive)
        elif started is not None:
            since = started.replace(tzinfo=UTC).timestamp()
            summaries = await ctx.frontier(job).summaries()
            mine = {
                node: s for node, s in summaries.items() if float(s.get("finished", 0)) >= since
            }
            state = run_state(snap)
            if await ctx.in_db(close_run, ctx.db, job, state, runs_total(mine)):
                logger.info("job %s: run %s", job, state)


async def _starter(ctx: ManagerContext, job: str) -> str:
    """Who started *job*'s nodes: whoever started its newest active process through
    Scrapyd (a token's name, "timer:NAME"), else "observed" (started outside)."""
    active = await ctx.in_db(list_processes, ctx.db, job, active=True, limit=1)
    return str(active[0]["started_by"]) if active else "observed"


async def observe_processes(ctx: ManagerContext) -> None:
    """Follow the pending and running processes started through Scrapyd: each takes the
    state its Scrapyd reports; one that Scrapyd no longer knows (restarted, or its
    history trimmed) is lost, never left running. A Scrapyd that does not answer leaves
    its processes as they are until it does, or marks them lost once it has not answered
    for SCRAPYD_LOST_SECONDS."""
    active = await ctx.in_db(list_processes, ctx.db, active=True, limit=10_000)
    if not active:
        return
    nodes = {n.name: n for n in await ctx.in_db(list_scrapyd, ctx.db)}
    for name in sorted({p["scrapyd"] for p in active}):
        mine = [p for p in active if p["scrapyd"] == name]
        if name not in nodes:
            for p in mine:
                await ctx.in_db(
                    set_process_state, ctx.db, p["id"], "lost", "Scrapyd removed", if_active=True
                )
            continue
        async with ScrapydClient(nodes[name]) as client:
            try:
                jobs = await client.listjobs()
            except ScrapydError:
                first = ctx.unreachable_since.setdefault(name, time.monotonic())
                down = time.monotonic() - first
                if down >= SCRAPYD_LOST_SECONDS:
                    note = f"Scrapyd {name} unreachable for {down:.0f} s"
                    for p in mine:
                        await ctx.in_db(
                            set_process_state, ctx.db, p["id"], "lost", note, if_active=True
                        )
                    logger.warning("%s: %d process(es) marked lost", note, len(mine))
                continue
        ctx.unreachable_since.pop(name, None)
        states = {
            str(j["id"]): state
            for state in ("pending", "running", "finished")
            for j in jobs.get(state, [])
        }
        for p in mine:
            now = states.get(p["scrapyd_job"])
            if now is None:
                await ctx.in_db(
                    set_process_state,
                    ctx.db,
                    p["id"],
                    "lost",
                    "Scrapyd no longer knows it",
                    if_active=True,
                )
            elif now != p["state"]:
                await ctx.in_db(set_process_state, ctx.db, p["id"], now, if_active=True)
                logger.info("job %s: process %d on %s %s", p["job"], p["id"], name, now)


async def observe_timers(ctx: ManagerContext) -> None:
    """Fire the timers that are due: the manager whose claim moves a timer's next due
    time fires it. Of the due times that passed since, the newest is fired if it is at
    most MISFIRE_GRACE_SECONDS old; the others are recorded as missed (said in the log)."""
    now = utcnow()
    for timer in await ctx.in_db(due_timers, ctx.db, now):
        due: datetime = timer["due_at"]
        if not await ctx.in_db(claim, ctx.db, timer["id"], due, next_due(timer["cron"], now)):
            continue  # another manager has it
        times = due_times(timer["cron"], due, now)
        newest = times[-1]
        fire = (now - newest).total_seconds() <= MISFIRE_GRACE_SECONDS
        missed = times[:-1] if fire else times
        if missed:
            detail = (
                f"{len(missed)} due time(s) from {missed[0].isoformat()}Z to "
                f"{missed[-1].isoformat()}Z passed with no manager to fire them"
            )
            logger.warning("timer %s: %s", timer["name"], detail)
            await ctx.in_db(record_fire, ctx.db, timer["id"], missed[-1], "missed", detail)
        if fire:
            outcome, detail = await _fire(ctx, timer)
            await ctx.in_db(record_fire, ctx.db, timer["id"], newest, outcome, detail)


async def _fire(ctx: ManagerContext, timer: dict[str, Any]) -> tuple[str, str]:
    """Do what *timer* says; ("fired" | "failed", what happened)."""
    actor = f"timer:{timer['name']}"
    job, action = timer["job"], timer["action"]
    try:
        if action == "run":
            result = await start_processes(ctx, job, RunBody(**timer["params"]), actor)
            detail = f"started {len(result['started'])} process(es)"
            if result["errors"]:
                detail += f"; {len(result['errors'])} failed: {result['errors'][0]}"
        else:
            sent = await send_command(ctx.redis, ctx.key_prefix, job, action)
            await ctx.record(actor, "job.control", job, {"command": action})
            detail = f"{action} sent to {sum(s.live for s in sent)} live node(s)"
    except (CrawlfleetError, ScrapydError, *REDIS_FAILURES) as exc:
        logger.warning("timer %s: %s of job %s failed: %s", timer["name"], action, job, exc)
        return "failed", " ".join(str(exc).split())[:500]
    logger.info("timer %s: %s", timer["name"], detail)
    return "fired", detail


async def watch(ctx: ManagerContext, interval: float) -> None:
    """observe_runs every *interval* seconds until cancelled; an outage of Redis or the
    state DB is logged once when it starts and once when it ends."""
    outages = {what: _outage(what) for what in ("Redis", "the state DB")}
    while True:
        try:
            snaps = await fleet_snapshots(ctx)
            note_history(ctx, snaps)
            await observe_runs(ctx, snaps)
            await observe_processes(ctx)
            await observe_timers(ctx)
            await evaluate(ctx, snaps)
            for outage in outages.values():
                outage.succeeded()
        except (*REDIS_FAILURES, SQLAlchemyError) as exc:
            outages["the state DB" if isinstance(exc, SQLAlchemyError) else "Redis"].failed(exc)
        await asyncio.sleep(interval)


def _outage(what: str) -> Outage:
    """An outage of *what* as the watch says it: its start and its end, no more."""
    return Outage(
        what,
        every=None,
        say_down=lambda exc: logger.warning(
            "watch: %s does not answer (%s); runs wait", what, type(exc).__name__
        ),
        say_back=lambda seconds: logger.info("watch: %s back after %.0f s", what, seconds),
    )
