"""A continuous job's freshness as crawlfleet status, the API and /metrics show it: read
from its counters, its change stream and a sample of its tracked pages, on a real Redis."""

from __future__ import annotations

import asyncio
import hashlib

from rich.console import Console
from scrapy import Request

from crawlfleet.cli.status import render
from crawlfleet.fleet.freshness import Freshness
from crawlfleet.fleet.snapshot import snapshot
from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.records import Outgoing, Revisit
from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.manager.metrics import _Fleet
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from tests.support.frontier import track_pages

SITE = "127.0.0.1:8"


def _outgoing(url: str) -> Outgoing:
    payload = RequestCodec(None).encode(Request(url))
    return Outgoing(hashlib.sha1(url.encode()).digest()[:16], SITE, 0, payload)


def test_a_continuous_jobs_freshness_is_in_its_snapshot_status_and_metrics(
    redis_server_url: str, key_prefix: str
) -> None:
    async def main() -> None:
        client = make_client(redis_server_url)
        try:
            keys = JobKeys.of(key_prefix, "fresh")
            f = Frontier(client, keys)
            await track_pages(f, SITE, [100, 200, 300, 400], changed=2)

            snap = await snapshot(client, keys)
            fresh = snap.freshness
            assert fresh is not None
            assert (fresh.tracked, fresh.revisits, fresh.changes) == (4, 0, 2)  # kept once
            assert fresh.changes_last_hour == 2 and not fresh.changes_hour_capped
            assert (fresh.sampled, fresh.overdue) == (4, 0)
            assert fresh.age_p50_s is not None and 195 <= fresh.age_p50_s <= 215
            assert fresh.age_p95_s is not None and 395 <= fresh.age_p95_s <= 415
            assert fresh.sites[SITE]["sampled"] == 4
            assert snap.to_json()["freshness"]["tracked"] == 4

            console = Console(width=120, record=True)
            console.print(render([snap]))
            shown = console.export_text()
            assert "pages tracked for revisits" in shown and "changes in the last hour" in shown
            assert "continuous" in shown and snap.eta_seconds is None

            families = {m.name: m for m in _Fleet([(snap, await f.counters())]).collect()}
            assert families["crawlfleet_job_pages_tracked"].samples[0].value == 4
            ages = {
                s.labels["quantile"]: s.value
                for s in families["crawlfleet_job_copy_age_seconds"].samples
            }
            assert set(ages) == {"0.5", "0.95"}

            # a job that tracks nothing reads nothing more, and shows nothing of it
            other = JobKeys.of(key_prefix, "once")
            await Frontier(client, other).commit("n1", [_outgoing(f"http://{SITE}/x")])
            plain = await snapshot(client, other)
            assert plain.freshness is None and plain.to_json()["freshness"] is None
        finally:
            await client.aclose()

    asyncio.run(main())


def test_the_live_nodes_visits_give_the_304_share_and_lateness() -> None:
    fresh = Freshness(tracked=3)
    fresh.add_nodes(
        {
            "a": {
                "alive": True,
                "revisits": {"changed": 2, "not_modified": 3, "late_seconds": 5.0},
            },
            "b": {"alive": True, "revisits": {"unchanged": 5, "kept": 9, "late_seconds": 5.0}},
            "gone": {"alive": False, "revisits": {"not_modified": 100}},
            "odd": {"alive": True, "revisits": "not figures"},
        }
    )
    assert fresh.outcomes == {"changed": 2, "not_modified": 3, "unchanged": 5}
    assert (fresh.not_modified_share, fresh.late_mean_s) == (0.3, 1.0)


def test_revisits_behind_are_counted_due_and_queued_in_all_and_per_site(
    redis_server_url: str, key_prefix: str
) -> None:
    async def main() -> None:
        client = make_client(redis_server_url)
        try:
            keys = JobKeys.of(key_prefix, "behind")
            f = Frontier(client, keys)
            urls = [f"http://{SITE}/p/{i}" for i in range(5)]
            await f.commit("n1", [_outgoing(u) for u in urls])
            leased = await f.lease("n1", 10, [SITE], lease_ms=60_000, per_site=10, offer_size=10)
            # two due now (queued by the reclaim), two due soon (not reclaimed yet: a
            # second leaves a loaded machine room, 100 ms once did not), one in an hour
            delays = [1, 1, 1000, 1000, 3_600_000]
            kept = [
                Revisit(e.rid, d, e.payload, new=True)
                for e, d in zip(leased.entries, delays, strict=True)
            ]
            assert (await f.commit("n1", revisits=kept)).revisited == 5
            await asyncio.sleep(0.05)
            await f.reclaim_expired()
            await asyncio.sleep(1.1)  # the next two are due, not queued
            snap = await snapshot(client, keys)
            fresh = snap.freshness
            assert fresh is not None
            assert (fresh.revisits_due, fresh.revisits_queued, fresh.behind) == (2, 2, 4)
            assert fresh.behind_sites == {SITE: 2}
            assert snap.queued == 2 and snap.top_sites == [(SITE, 2)]

            console = Console(width=120, record=True)
            console.print(render([snap]))
            assert "revisits behind (due / queued)" in console.export_text()
            families = {m.name: m for m in _Fleet([(snap, await f.counters())]).collect()}
            behind = {
                s.labels["state"]: s.value
                for s in families["crawlfleet_job_revisits_behind"].samples
            }
            assert behind == {"due": 2, "queued": 2}
            per_site = families["crawlfleet_site_revisits_queued"].samples
            assert [(s.labels["site"], s.value) for s in per_site] == [(SITE, 2)]
        finally:
            await client.aclose()

    asyncio.run(main())
