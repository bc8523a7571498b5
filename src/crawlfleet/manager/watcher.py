"""The manager's watch over the fleet: every ``CRAWLFLEET_MANAGER_WATCH_SECONDS`` it
opens a run for each job that has live nodes and none open, and closes the open run of a
job whose nodes are all gone, with the figures its nodes left (their summaries)."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError

from crawlfleet.fleet.jobs import job_figures, list_jobs, runs_total
from crawlfleet.fleet.snapshot import JOBS_MAX, JobSnapshot, snapshot
from crawlfleet.manager.context import ManagerContext
from crawlfleet.state.runs import close_run, open_run, open_run_start, touch_run

__all__ = ["observe_runs", "run_state", "watch"]

logger = logging.getLogger(__name__)


def run_state(snap: JobSnapshot) -> str:
    """How a run ended, its nodes all gone: finished (no work left), lost (nodes that
    stopped heartbeating are still registered) or stopped (they left work queued)."""
    if snap.queued == 0 and snap.leased == 0:
        return "finished"
    return "lost" if snap.nodes else "stopped"


async def observe_runs(ctx: ManagerContext) -> None:
    """One look at every job (see the module docstring)."""
    for job in (await list_jobs(ctx.redis, ctx.key_prefix))[:JOBS_MAX]:
        snap = await snapshot(ctx.redis, ctx.keys(job), ctx.limits)
        alive = len(snap.live_nodes)
        started = await ctx.in_db(open_run_start, ctx.db, job)
        if alive and started is None:
            if await ctx.in_db(open_run, ctx.db, job, nodes=alive):
                logger.info("job %s: run started (%d live nodes)", job, alive)
        elif alive:
            await ctx.in_db(touch_run, ctx.db, job, nodes=alive)
        elif started is not None:
            since = started.replace(tzinfo=UTC).timestamp()
            summaries = (await job_figures(ctx.frontier(job)))["runs"]
            mine = {
                node: s for node, s in summaries.items() if float(s.get("finished", 0)) >= since
            }
            state = run_state(snap)
            if await ctx.in_db(close_run, ctx.db, job, state, runs_total(mine)):
                logger.info("job %s: run %s", job, state)


async def watch(ctx: ManagerContext, interval: float) -> None:
    """observe_runs every *interval* seconds until cancelled; an outage of Redis or the
    state DB is logged once when it starts and once when it ends."""
    trouble: str | None = None
    since = datetime.now(UTC)
    while True:
        try:
            await observe_runs(ctx)
            if trouble:
                logger.info("watch: %s back after %.0f s", trouble, _age(since))
                trouble = None
        except (RedisError, SQLAlchemyError) as exc:
            what = "Redis" if isinstance(exc, RedisError) else "the state DB"
            if trouble != what:
                logger.warning(
                    "watch: %s does not answer (%s); runs wait", what, type(exc).__name__
                )
                trouble, since = what, datetime.now(UTC)
        await asyncio.sleep(interval)


def _age(since: datetime) -> float:
    return (datetime.now(UTC) - since).total_seconds()
