"""``GET /metrics``: the fleet in Prometheus's text format, read from Redis at each scrape.

Names start with ``crawlfleet_``; labels are ``job``, ``site`` and ``node``, bounded in
number: at most JOBS_MAX jobs, a job's TOP_SITES longest site queues (and the sites in
back-off among them), and its registered nodes. Needs a viewer token, as the API does
(Prometheus: ``authorization: {credentials: TOKEN}`` in the scrape config).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from crawlfleet.fleet.jobs import list_jobs
from crawlfleet.fleet.snapshot import JOBS_MAX, JobSnapshot, snapshots
from crawlfleet.manager.auth import Ctx, Viewer
from crawlfleet.manager.context import ManagerContext

__all__ = ["collect_fleet", "router"]

router = APIRouter(tags=["metrics"])

#: Job counters exported as Prometheus counters: counter -> (name, help)
JOB_COUNTERS = {
    "acked": ("requests_done", "requests done (acknowledged) by the job's nodes"),
    "enqueued": ("requests_enqueued", "requests queued, seeds and links"),
    "duplicates": ("duplicates_filtered", "requests dropped as already seen"),
    "requeued": ("requests_requeued", "leases returned to the queue (node gone, pause)"),
    "bad": ("malformed_entries", "entries set aside as malformed"),
    "revisits": ("revisits", "visits of tracked pages kept for another (continuous jobs)"),
    "changes": ("changes_found", "changes found on revisited pages (continuous jobs)"),
}
#: Node figures exported as gauges: status key -> (name, help, scale)
NODE_GAUGES = {
    "pages_per_min": ("node_pages_per_minute", "pages per minute over the window", 1.0),
    "items_per_min": ("node_items_per_minute", "items per minute over the window", 1.0),
    "latency_ms": ("node_latency_seconds", "mean download latency", 0.001),
    "in_flight": ("node_in_flight", "requests being downloaded", 1.0),
    "concurrency": ("node_concurrency", "requests the node runs at once", 1.0),
    "cpu_percent": ("node_cpu_percent", "CPU use (100: one core)", 1.0),
    "rss_bytes": ("node_memory_bytes", "resident memory", 1.0),
    "loop_lag_max_ms": ("node_loop_lag_seconds", "longest event-loop lag in the window", 0.001),
}


class _Fleet(Collector):
    """The figures gathered for one scrape, as metric families."""

    def __init__(self, jobs: list[tuple[JobSnapshot, dict[str, int]]]) -> None:
        self.jobs = jobs

    def collect(self) -> Iterator[Metric]:
        def gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"crawlfleet_{name}", doc, labels=labels)

        queued = gauge("job_queued", "requests queued", ["job"])
        leased = gauge("job_leased", "requests leased to nodes", ["job"])
        overdue = gauge("job_leases_overdue", "leases past their deadline", ["job"])
        waiting = gauge("job_waiting", "requests waiting for their time", ["job"])
        rate = gauge("job_pages_per_second", "summed page rate of live nodes", ["job"])
        eta = gauge("job_eta_seconds", "time left (absent while unknown)", ["job"])
        paused = gauge("job_paused", "1 while the job is paused or stopped", ["job"])
        nodes = gauge("job_nodes", "registered nodes by liveness", ["job", "state"])
        site_queued = gauge("site_queued", "requests queued for a site", ["job", "site"])
        backoff = gauge("site_backoff_seconds", "back-off interval of a site", ["job", "site"])
        up = gauge("node_up", "1 while the node heartbeats", ["job", "node"])
        tracked = gauge("job_pages_tracked", "pages kept for revisits", ["job"])
        changes_hour = gauge("job_changes_last_hour", "changes found in the last hour", ["job"])
        behind = gauge(
            "job_revisits_behind",
            "revisits whose time came, not leased yet: waiting for the reclaim or queued",
            ["job", "state"],
        )
        site_behind = gauge(
            "site_revisits_queued", "revisits queued for a site (top sites)", ["job", "site"]
        )
        age = gauge(
            "job_copy_age_seconds",
            "time since the last visit of sampled tracked pages",
            ["job", "quantile"],
        )
        node_gauges = {
            key: (gauge(name, doc, ["job", "node"]), scale)
            for key, (name, doc, scale) in NODE_GAUGES.items()
        }
        counters = {
            key: CounterMetricFamily(f"crawlfleet_{name}", doc, labels=["job"])
            for key, (name, doc) in JOB_COUNTERS.items()
        }
        errors = CounterMetricFamily(
            "crawlfleet_node_errors",
            "errors of a live node by kind",
            labels=["job", "node", "kind"],
        )
        for snap, job_counters in self.jobs:
            j = [snap.job]
            queued.add_metric(j, snap.queued)
            leased.add_metric(j, snap.leased - snap.waiting)
            overdue.add_metric(j, snap.overdue_leases)
            waiting.add_metric(j, snap.waiting)
            rate.add_metric(j, snap.pages_per_second or 0.0)
            if snap.eta_seconds is not None:
                eta.add_metric(j, snap.eta_seconds)
            paused.add_metric(j, 1.0 if snap.paused else 0.0)
            fresh = snap.freshness
            if fresh is not None:
                tracked.add_metric(j, fresh.tracked)
                changes_hour.add_metric(j, fresh.changes_last_hour)
                behind.add_metric([snap.job, "due"], fresh.revisits_due)
                behind.add_metric([snap.job, "queued"], fresh.revisits_queued)
                for site, n in fresh.behind_sites.items():
                    site_behind.add_metric([snap.job, site], n)
                for quantile, value in (("0.5", fresh.age_p50_s), ("0.95", fresh.age_p95_s)):
                    if value is not None:
                        age.add_metric([snap.job, quantile], value)
            alive = len(snap.live_nodes)
            nodes.add_metric([snap.job, "alive"], alive)
            nodes.add_metric([snap.job, "dead"], len(snap.nodes) - alive)
            for site, n in snap.top_sites:
                site_queued.add_metric([snap.job, site], n)
            shown = {site for site, _ in snap.top_sites}
            for site, ms in snap.backoff.items():
                if site in shown:
                    backoff.add_metric([snap.job, site], ms / 1000)
            for key, counter in counters.items():
                counter.add_metric(j, job_counters.get(key, 0))
            for node, info in sorted(snap.nodes.items()):
                up.add_metric([snap.job, node], 1.0 if info.get("alive") else 0.0)
                if not info.get("alive"):
                    continue
                for key, (node_gauge, scale) in node_gauges.items():
                    value = info.get(key)
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        node_gauge.add_metric([snap.job, node], value * scale)
                for kind, n in _errors(info).items():
                    errors.add_metric([snap.job, node, kind], n)
        yield from (
            queued,
            leased,
            overdue,
            waiting,
            rate,
            eta,
            paused,
            nodes,
            site_queued,
            backoff,
        )
        yield from (tracked, changes_hour, behind, site_behind, age)
        yield from counters.values()
        yield up
        yield from (family for family, _ in node_gauges.values())
        yield errors


def _errors(info: dict[str, Any]) -> dict[str, int]:
    raw = info.get("errors")
    if not isinstance(raw, dict):
        return {}
    return {str(k): int(v) for k, v in raw.items() if isinstance(v, int) and v >= 0}


async def collect_fleet(ctx: ManagerContext) -> bytes:
    """The fleet's figures now, in Prometheus's text format."""
    names = (await list_jobs(ctx.redis, ctx.key_prefix))[:JOBS_MAX]
    snaps = await snapshots(ctx.redis, [ctx.keys(job) for job in names], ctx.limits)
    jobs = [(snap, snap.counters) for snap in snaps]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fleet(jobs))
    return generate_latest(registry)


@router.get(
    "/metrics",
    summary="the fleet's figures in Prometheus's text format",
    response_class=PlainTextResponse,
)
async def metrics(ctx: Ctx, _: Viewer) -> PlainTextResponse:
    return PlainTextResponse(
        await collect_fleet(ctx), media_type="text/plain; version=0.0.4; charset=utf-8"
    )
