"""Alert evaluation and delivery.

Every watch, each enabled rule is evaluated on its job (or every job): the metric's
value against the threshold. A condition that holds opens a pending alert; held for the
rule's ``for_seconds`` it fires; once it no longer holds, a firing alert resolves. Firing
and resolving are delivered to the rule's webhook as JSON, signed with HMAC-SHA256 of
the body with the rule's secret (``X-Crawlfleet-Signature: sha256=<hex>``), tried
DELIVERY_ATTEMPTS times with growing pauses, each attempt recorded.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx

from crawlfleet.fleet.snapshot import JobSnapshot
from crawlfleet.manager.context import ManagerContext
from crawlfleet.state.alerts import (
    OPERATORS,
    move_alert,
    open_alert,
    open_alerts,
    record_delivery,
    rules_enabled,
)
from crawlfleet.state.models import utcnow

__all__ = ["DELIVERY_ATTEMPTS", "METRICS", "JobFigures", "evaluate", "sign"]

logger = logging.getLogger(__name__)

DELIVERY_ATTEMPTS = 4
#: Pause before the attempt after the first, the second... (seconds).
DELIVERY_PAUSES = (1.0, 4.0, 15.0)
DELIVERY_TIMEOUT_SECONDS = 10.0


class JobFigures:
    """What the metrics of one job are computed from."""

    def __init__(self, snap: JobSnapshot, counters: dict[str, int], stalled: float) -> None:
        self.snap = snap
        self.counters = counters
        self.stalled = stalled

    def live(self, key: str) -> float:
        return sum(
            float(info[key])
            for info in self.snap.nodes.values()
            if info.get("alive") and isinstance(info.get(key), int | float)
        )

    def errors(self) -> float:
        total = 0
        for info in self.snap.nodes.values():
            raw = info.get("errors")
            if info.get("alive") and isinstance(raw, dict):
                total += sum(v for v in raw.values() if isinstance(v, int))
        return float(total)


def _work_left(f: JobFigures) -> bool:
    return bool(f.snap.queued or f.snap.leased)


def _finished(f: JobFigures) -> float:
    return float(not f.snap.live_nodes and not _work_left(f) and f.counters.get("acked", 0) > 0)


#: metric -> what it measures, and how from a job's figures
METRICS: dict[str, tuple[str, Callable[[JobFigures], float]]] = {
    "job_finished": (
        "1 once the job has no work and no live node after doing some",
        lambda f: float(
            not f.snap.live_nodes and not _work_left(f) and f.counters.get("acked", 0) > 0
        ),
    ),
    "job_failed": (
        "1 when its nodes stopped heartbeating with work left (a lost run)",
        lambda f: float(not f.snap.live_nodes and _work_left(f) and bool(f.snap.nodes)),
    ),
    "nodes_alive": ("live nodes", lambda f: float(len(f.snap.live_nodes))),
    "nodes_dead": (
        "registered nodes that stopped heartbeating",
        lambda f: float(len(f.snap.nodes) - len(f.snap.live_nodes)),
    ),
    "queued": ("requests queued", lambda f: float(f.snap.queued)),
    "pages_per_second": (
        "summed page rate of live nodes",
        lambda f: f.snap.pages_per_second or 0.0,
    ),
    "items_per_minute": ("summed item rate of live nodes", lambda f: f.live("items_per_min")),
    "errors_per_page": (
        "errors over pages of the live nodes",
        lambda f: f.errors() / max(f.live("pages"), 1.0),
    ),
    "backoff_sites": ("sites in back-off", lambda f: float(len(f.snap.backoff))),
    "queue_stalled_seconds": (
        "seconds since a request was last done while work is left",
        lambda f: f.stalled,
    ),
}


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


async def _figures(ctx: ManagerContext, job: str, snap: JobSnapshot) -> JobFigures:
    counters = snap.counters  # read with the snapshot
    done, now = counters.get("acked", 0), time.monotonic()
    last = ctx.progress.get(job)
    if last is None or last[0] != done or not (snap.queued or snap.leased):
        ctx.progress[job] = (done, now)
        stalled = 0.0
    else:
        stalled = now - last[1]
    return JobFigures(snap, counters, stalled)


async def evaluate(ctx: ManagerContext, snaps: dict[str, JobSnapshot]) -> None:
    """One evaluation of every enabled rule on the jobs of *snaps* (see the module
    docstring)."""
    rules = await ctx.in_db(rules_enabled, ctx.db)
    if not rules:
        return
    jobs = list(snaps)
    figures = {job: await _figures(ctx, job, snap) for job, snap in snaps.items()}
    for rule in rules:
        compare = OPERATORS[rule["op"]]
        measure = METRICS[rule["metric"]][1]
        current = await ctx.in_db(open_alerts, ctx.db, rule["id"])
        for job in [rule["job"]] if rule["job"] else jobs:
            if job not in figures:
                continue
            value = measure(figures[job])
            holds = compare(value, rule["threshold"])
            alert = current.get(job)
            if holds and alert is None:
                await ctx.in_db(open_alert, ctx.db, rule["id"], job, value)
                current = await ctx.in_db(open_alerts, ctx.db, rule["id"])
                alert = current.get(job)
            if alert is None:
                continue
            if holds and alert["status"] == "pending":
                held = (utcnow() - alert["since"]).total_seconds()
                if held >= rule["for_seconds"] and await ctx.in_db(
                    move_alert, ctx.db, alert["id"], "pending", "firing", value
                ):
                    _deliver_later(ctx, rule, alert["id"], job, "firing", value)
            elif not holds:
                moved = await ctx.in_db(
                    move_alert, ctx.db, alert["id"], alert["status"], "resolved", value
                )
                if moved and alert["status"] == "firing":  # a pending one goes quietly
                    _deliver_later(ctx, rule, alert["id"], job, "resolved", value)


def _deliver_later(
    ctx: ManagerContext, rule: dict[str, Any], alert_id: int, job: str, event: str, value: float
) -> None:
    logger.info("alert %s on job %s: %s (%s = %g)", rule["name"], job, event, rule["metric"], value)
    task = asyncio.create_task(_deliver(ctx, rule, alert_id, job, event, value))
    ctx.deliveries.add(task)
    task.add_done_callback(ctx.deliveries.discard)


async def _deliver(
    ctx: ManagerContext, rule: dict[str, Any], alert_id: int, job: str, event: str, value: float
) -> None:
    body = json.dumps(
        {
            "alert": rule["name"],
            "status": event,
            "job": job,
            "metric": rule["metric"],
            "value": value,
            "op": rule["op"],
            "threshold": rule["threshold"],
            "for_seconds": rule["for_seconds"],
            "at": utcnow().isoformat(timespec="seconds") + "Z",
        },
        sort_keys=True,
    ).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "crawlfleet-manager",
        "X-Crawlfleet-Signature": sign(rule["secret"], body),
    }
    async with httpx.AsyncClient(timeout=DELIVERY_TIMEOUT_SECONDS) as client:
        for attempt in range(1, DELIVERY_ATTEMPTS + 1):
            status, error = None, ""
            try:
                response = await client.post(rule["webhook_url"], content=body, headers=headers)
                status = response.status_code
                ok = 200 <= status < 300
                if not ok:
                    error = f"answered {status}"
            except httpx.HTTPError as exc:
                ok, error = False, type(exc).__name__  # the URL (a token) is never recorded
            await ctx.in_db(record_delivery, ctx.db, alert_id, event, attempt, ok, status, error)
            if ok:
                return
            if attempt < DELIVERY_ATTEMPTS:
                await asyncio.sleep(DELIVERY_PAUSES[min(attempt - 1, len(DELIVERY_PAUSES) - 1)])
    logger.warning(
        "alert %s on job %s: %s not delivered after %d attempts (%s)",
        rule["name"],
        job,
        event,
        DELIVERY_ATTEMPTS,
        error,
    )
