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
from crawlfleet.frontier.records import Outgoing
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
