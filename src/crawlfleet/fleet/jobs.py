"""Jobs of a Redis: list them, read one's figures and its closed runs, reset one.

``crawlfleet job ...`` and the manager's ``/api/v1/jobs`` call these, so both say the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from crawlfleet.exceptions import CommandFailed, UnknownJob
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.redis.keys import jobs_key
from crawlfleet.redis.replies import node_statuses, text

__all__ = ["ResetResult", "job_figures", "list_jobs", "require_job", "reset_job", "runs_total"]


async def list_jobs(client: Redis, prefix: str) -> list[str]:
    """Every job this Redis has seen under *prefix*, sorted."""
    return sorted(text(j) for j in await client.smembers(jobs_key(prefix)))


async def require_job(client: Redis, prefix: str, job: str) -> None:
    """UnknownJob (listing the known ones) if this Redis has never seen *job*."""
    if await client.sismember(jobs_key(prefix), job):
        return
    known = await list_jobs(client, prefix)
    shown = ", ".join(known[:10]) + (", ..." if len(known) > 10 else "")
    raise UnknownJob(
        f"no job {job!r} in this Redis (key prefix {prefix!r}); "
        + (f"known jobs: {shown}" if known else "it has no jobs yet")
    )


async def job_figures(frontier: JobFrontier) -> dict[str, Any]:
    """A job's counters, queue and lease sizes, live nodes' published figures and the
    summaries its closed node runs left (with ``runs_total``, their sum)."""
    counters = await frontier.counters()
    nodes = await frontier.live_nodes()
    client, keys = frontier.client, frontier.keys
    published = node_statuses(await client.hgetall(keys.nodeinfo))
    info = {node: status for node, status in published.items() if node in nodes}
    runs = await frontier.summaries()
    sizes = await frontier.sizes()
    return {
        "job": keys.job,
        "queued": counters.get("queued", 0),
        "leased": sizes["leased"],
        "waiting": sizes["waiting"],
        "sites": sizes["sites"],
        "malformed_set_aside": sizes["malformed"],
        "counters": counters,
        "nodes": info,
        "runs": runs,
        "runs_total": runs_total(runs),
    }


def runs_total(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The closed nodes' summaries added up: pages, items per store, errors, the span
    from the first start to the last close, and the rate over it ({} when none)."""
    if not runs:
        return {}
    started = min(float(r.get("started", 0)) for r in runs.values())
    finished = max(float(r.get("finished", 0)) for r in runs.values())
    pages = sum(int(r.get("pages", 0)) for r in runs.values())
    stored: dict[str, int] = {}
    for r in runs.values():
        for store, n in (r.get("stored") or {}).items():
            stored[store] = stored.get(store, 0) + int(n)
    span = max(0.0, finished - started)
    return {
        "nodes": len(runs),
        "reasons": sorted({str(r.get("reason")) for r in runs.values()}),
        "pages": pages,
        "items": sum(int(r.get("items", 0)) for r in runs.values()),
        "stored": stored,
        "errors": sum(int(r.get("errors", 0)) for r in runs.values()),
        "seconds": round(span, 2),
        "pages_per_second": round(pages / span, 2) if span else 0.0,
    }


@dataclass(frozen=True)
class ResetResult:
    """What a reset did: keys deleted, and the item stream's entries it kept."""

    deleted: int
    unstored_items: int
    kept_limits: bool


async def reset_job(
    frontier: JobFrontier, *, force: bool, keep_limits: bool, force_hint: str = "force"
) -> ResetResult:
    """Delete every key of the job (its run-time limits too unless *keep_limits*); its
    item stream is kept (items are output, not crawl state). CommandFailed, changing
    nothing, while nodes are alive on the job unless *force* (the message names
    *force_hint*: how the caller asks for it)."""
    live = await frontier.live_nodes()
    if live and not force:
        raise CommandFailed(
            f"refusing to reset {frontier.keys.job}: live nodes {', '.join(live)}"
            f" (stop them first, or {force_hint})"
        )
    deleted = await frontier.reset(keep_limits=keep_limits)
    unstored = int(await frontier.client.xlen(frontier.keys.items))
    return ResetResult(deleted, unstored, keep_limits)
