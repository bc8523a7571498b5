"""The manager steering real nodes: two node processes crawl the bundled test site; the
API pauses them (acknowledged, nothing fetched while paused), resumes them, and shows
the job finished with its figures and its run in the history."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import TestSite
from tests.support.manager import Manager
from tests.support.nodes import nodes
from tests.support.waiting import wait_until


@pytest.mark.slow
def test_pause_and_resume_real_nodes_through_the_api(
    manager: Manager, node_env: dict[str, str], tmp_path: Path
) -> None:
    op = manager.as_("operator")
    model = SiteModel(pages=150, hosts=2, problems=False)
    with TestSite(model, latency_seconds=0.25) as site:
        procs = nodes(2, site, manager.redis_url, node_env, tmp_path, "steered")
        try:
            wait_until("crawl started", lambda: site.stats()["content_fetched"] >= 20)
            r = manager.client.post(
                "/api/v1/jobs/steered/control",
                json={"command": "pause", "wait_seconds": 15},
                headers=op,
            )
            (sent,) = r.json()["sent"]
            assert sent["pending"] == [] and sorted(sent["acked"].values()) == ["paused"] * 2
            time.sleep(1.0)  # requests in flight at the pause end within this
            fetched = site.stats()["content_fetched"]
            time.sleep(1.5)
            assert site.stats()["content_fetched"] == fetched  # nothing while paused
            job = manager.client.get("/api/v1/jobs/steered", headers=op).json()
            assert job["state"] == "paused" and job["queued"] > 0
            assert sorted(n["state"] for n in job["nodes"].values()) == ["paused", "paused"]
            r = manager.client.post(
                "/api/v1/jobs/steered/control", json={"command": "resume"}, headers=op
            )
            assert r.status_code == 200
            for p in procs:
                assert p.wait(120) == 0
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        stats = site.stats()
        assert stats["never_fetched"] == [] and stats["fetched_twice"] == []
    job = manager.client.get("/api/v1/jobs/steered", headers=op).json()
    assert job["state"] == "finished" and job["queued"] == 0 and job["leased"] == 0
    assert job["runs_total"]["nodes"] == 2 and job["runs_total"]["pages"] >= 150

    # the manager's watch kept the run: one, finished, by two nodes, with its figures
    def runs() -> list[dict[str, Any]]:
        return manager.get("/api/v1/jobs/steered/runs")["runs"]  # type: ignore[no-any-return]

    manager.wait_for("run closed", lambda: bool(runs()) and runs()[0]["state"] != "running")
    (run,) = runs()
    assert run["state"] == "finished" and run["nodes_max"] == 2
    assert run["figures"]["pages"] >= 150 and run["figures"]["nodes"] == 2
