"""How fresh a continuous job's copy is: the figures ``crawlfleet status``, the API, the
dashboard and ``/metrics`` show for a job whose pages are revisited.

From the job's counters (exact): pages ``tracked`` (kept for revisits), ``revisits``
made, ``changes`` found; from its change stream (exact up to :data:`HOUR_SCAN` events):
changes found in the last hour; from a sample of the tracked pages waiting for their
next visit (``ZRANDMEMBER`` of the job's waiting set, their entries decoded: at most
:data:`SAMPLE` a shard, one round trip each): the age of the copy (time since the last
visit: median, 95th percentile), per site too, and how many of them are past their due
time and not queued yet; from the live nodes' status: their visits by outcome, the share
answered 304, how late visits were after their due time. Pages whose revisit is queued
or being fetched are not in the sample: a job that falls behind shows it in ``overdue``
(sampled pages past due) and in how late the nodes' visits are, and exactly in
``behind``: revisits whose time came and that are not leased yet, those still waiting
for the reclaim (``revisits_due``) and those queued in their sites' revisit lists
(``revisits_queued``, a counter; per site, for the sites with the most of the first
:data:`SITES_SCANNED` of each shard, in ``behind_sites``).

Reads only: four round trips a shard, whatever the job's size.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from crawlfleet.exceptions import MalformedEntry
from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.records import entry_fault, split_entry
from crawlfleet.frontier.serialization import payload_meta
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.meta import REVISIT_META
from crawlfleet.redis.replies import text
from crawlfleet.revisit.state import OUTCOMES

__all__ = ["HOUR_SCAN", "SAMPLE", "Freshness", "job_freshness"]

#: Tracked pages sampled per shard for the age of the copy.
SAMPLE = 200
#: Change-stream events read at most per shard to count the last hour's.
HOUR_SCAN = 10_000
#: Sites shown apart (those with the most sampled pages, or revisits queued).
TOP_SITES = 10
#: Sites with queued requests read per shard for their revisits queued.
SITES_SCANNED = 200


@dataclass
class Freshness:
    """A continuous job's freshness (see the module docstring); ages in seconds."""

    tracked: int = 0
    revisits: int = 0
    changes: int = 0
    #: changes found in the last hour (at least this many when ``changes_hour_capped``)
    changes_last_hour: int = 0
    changes_hour_capped: bool = False
    #: tracked pages sampled, and of them those past their due time, not queued yet
    sampled: int = 0
    overdue: int = 0
    #: revisits whose time came, not leased yet: waiting for the reclaim, queued (in
    #: their sites' revisit lists), both; site -> revisits queued (the top sites)
    revisits_due: int = 0
    revisits_queued: int = 0
    behind: int = 0
    behind_sites: dict[str, int] = field(default_factory=dict)
    age_p50_s: float | None = None
    age_p95_s: float | None = None
    #: site -> {"sampled", "age_p50_s", "age_p95_s"}
    sites: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the live nodes' visits so far by outcome (changed, unchanged, not_modified,
    #: gone, failed), the share of them answered 304, and how late they were on
    #: average after their due time (s)
    outcomes: dict[str, int] = field(default_factory=dict)
    not_modified_share: float | None = None
    late_mean_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def add_nodes(self, nodes: dict[str, dict[str, Any]]) -> None:
        """Sum the ``revisits`` figures the live *nodes* publish in their status."""
        late = 0.0
        for info in nodes.values():
            figures = info.get("revisits")
            if not info.get("alive") or not isinstance(figures, dict):
                continue
            for name, value in figures.items():
                if not isinstance(value, int | float) or isinstance(value, bool):
                    continue
                if name == "late_seconds":
                    late += value
                elif name in OUTCOMES:
                    self.outcomes[name] = self.outcomes.get(name, 0) + int(value)
        visits = sum(self.outcomes.values())
        if visits:
            self.not_modified_share = round(self.outcomes.get("not_modified", 0) / visits, 3)
            self.late_mean_s = round(late / visits, 2)


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)], 1)


async def job_freshness(frontier: JobFrontier, sample: int = SAMPLE) -> Freshness:
    """The freshness of *frontier*'s job now (Redis's clock)."""
    counters = await frontier.counters()
    out = Freshness(
        tracked=int(counters.get("tracked", 0)),
        revisits=int(counters.get("revisits", 0)),
        changes=int(counters.get("changes", 0)),
        revisits_queued=max(0, int(counters.get("revisits_queued", 0))),
    )
    if not out.tracked and not out.changes:
        return out  # not a continuous job: nothing more to read
    seconds, micros = await frontier.client.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    ages: dict[str, list[float]] = {}
    behind: dict[str, int] = {}
    for part in await frontier.shards():
        await _count_hour(part, now_ms, out)
        await _sample_ages(part, now_ms, sample, out, ages)
        await _count_behind(part, now_ms, out, behind)
    out.behind = out.revisits_due + out.revisits_queued
    top_behind = sorted(behind.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_SITES]
    out.behind_sites = {site: n for site, n in top_behind if n > 0}
    every = [a for site_ages in ages.values() for a in site_ages]
    out.age_p50_s, out.age_p95_s = _quantile(every, 0.5), _quantile(every, 0.95)
    top = sorted(ages.items(), key=lambda kv: -len(kv[1]))[:TOP_SITES]
    out.sites = {
        site: {
            "sampled": len(values),
            "age_p50_s": _quantile(values, 0.5),
            "age_p95_s": _quantile(values, 0.95),
        }
        for site, values in top
    }
    return out


async def _count_hour(part: Frontier, now_ms: int, out: Freshness) -> None:
    events: list[Any] = (
        await part.client.xrange(
            part.keys.changes, min=str(now_ms - 3_600_000), max="+", count=HOUR_SCAN
        )
        or []
    )
    out.changes_last_hour += len(events)
    out.changes_hour_capped = out.changes_hour_capped or len(events) >= HOUR_SCAN


async def _count_behind(
    part: Frontier, now_ms: int, out: Freshness, behind: dict[str, int]
) -> None:
    """Revisits due in *part*'s waiting set; its first sites' revisits queued."""
    keys = part.keys
    out.revisits_due += int(await part.client.zcount(keys.waiting, "-inf", f"({now_ms}"))
    sites = [text(s) for s in await part.client.zrange(keys.sites, 0, SITES_SCANNED - 1)]
    if not sites:
        return
    pipe = part.client.pipeline(transaction=False)
    for site in sites:
        pipe.llen(keys.revisits(site))
    for site, n in zip(sites, await pipe.execute(), strict=True):
        behind[site] = int(n)


async def _sample_ages(
    part: Frontier, now_ms: int, sample: int, out: Freshness, ages: dict[str, list[float]]
) -> None:
    keys = part.keys
    picked: Any = await part.client.zrandmember(keys.waiting, sample, withscores=True)
    if not picked:
        return
    # ZRANDMEMBER WITHSCORES: [member, score, member, score, ...]
    rids = [text(r) for r in picked[0::2]]
    deadlines = [float(s) for s in picked[1::2]]
    entries: Any = await part.client.hmget(keys.req, rids)
    for entry, deadline in zip(entries, deadlines, strict=True):
        if entry is None or entry_fault(entry):
            continue  # gone since it was picked, or malformed (the reclaim sets it aside)
        site, payload = split_entry(entry)
        try:
            state = payload_meta(payload).get(REVISIT_META)
        except MalformedEntry:
            continue
        if not isinstance(state, dict) or not isinstance(state.get("last"), int | float):
            continue
        out.sampled += 1
        out.overdue += deadline <= now_ms
        ages.setdefault(site, []).append(max(0.0, now_ms / 1000 - float(state["last"])))
