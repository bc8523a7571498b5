"""Job runs as the manager's watch records them: opened by live nodes, closed as
finished, stopped or lost once none is left."""

from __future__ import annotations

import time

from tests.support.manager import Manager

SEEDS = [f"http://site.test/p/{i}" for i in range(3)]


def runs(m: Manager, job: str) -> list[dict]:  # type: ignore[type-arg]
    return m.get(f"/api/v1/jobs/{job}/runs")["runs"]  # type: ignore[no-any-return]


def test_a_run_opens_with_live_nodes_and_closes_when_they_leave(manager: Manager) -> None:
    manager.beat("news", "n1")
    manager.wait_for("a run", lambda: len(runs(manager, "news")) == 1)
    manager.beat("news", "n2")
    manager.wait_for("2 nodes", lambda: runs(manager, "news")[0]["nodes_max"] == 2)
    (run,) = runs(manager, "news")
    assert run["state"] == "running" and run["started_by"] == "observed"
    assert run["finished_at"] is None
    manager.beat("news", "n1", state="leaving")
    time.sleep(0.6)  # one node left, one still alive: still running
    assert runs(manager, "news")[0]["state"] == "running"
    manager.beat("news", "n2", state="leaving")
    manager.wait_for("closed", lambda: runs(manager, "news")[0]["state"] != "running")
    (run,) = runs(manager, "news")
    assert run["state"] == "finished" and run["finished_at"] is not None
    # nodes again: a second run, newest first
    manager.beat("news", "n3")
    manager.wait_for("a second run", lambda: len(runs(manager, "news")) == 2)
    assert [r["state"] for r in runs(manager, "news")] == ["running", "finished"]


def test_nodes_that_die_with_work_left_make_a_lost_run(manager: Manager) -> None:
    op = manager.as_("operator")
    manager.client.post("/api/v1/jobs/news/seeds", json={"seeds": SEEDS}, headers=op)
    manager.beat("news", "n1", ttl_ms=600)  # then silent: its registration runs out
    manager.wait_for("a run", lambda: len(runs(manager, "news")) == 1)
    manager.wait_for("lost", lambda: runs(manager, "news")[0]["state"] == "lost")
    # a node that leaves cleanly with work queued: stopped
    manager.beat("other", "n1")
    manager.client.post("/api/v1/jobs/other/seeds", json={"seeds": SEEDS}, headers=op)
    manager.wait_for("a run", lambda: len(runs(manager, "other")) == 1)
    manager.beat("other", "n1", state="leaving")
    manager.wait_for("stopped", lambda: runs(manager, "other")[0]["state"] == "stopped")
