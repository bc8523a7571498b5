"""The Scrapyd parts that need no Scrapyd: the least-loaded choice, log levels, and a
Scrapyd that stops answering (its processes lost after a while, never left running)."""

from __future__ import annotations

import pytest

from crawlfleet.manager import watcher
from crawlfleet.manager.scrapyd import Load, least_loaded, log_levels
from crawlfleet.state.scrapyd import list_processes, record_process
from tests.support.manager import Manager


def test_least_loaded_spreads_over_the_freest_reachable_nodes() -> None:
    loads = [
        Load("a", True, running=2),
        Load("b", True, running=0, cpu_percent=50),
        Load("c", True, running=0),
        Load("d", False, error="unreachable"),
    ]
    assert least_loaded(loads, 5) == ["c", "b", "c", "b", "a"]  # b: half a core busy
    assert least_loaded([Load("d", False)], 2) == []


def test_log_levels_count_scrapy_log_lines() -> None:
    text = (
        "2026-11-25 07:00:00 [scrapy.core.engine] INFO: Spider opened\n"
        "2026-11-25 07:00:01 [crawlfleet.node] WARNING: slow\n"
        "2026-11-25 07:00:02 [scrapy.core.scraper] ERROR: Spider error processing\n"
        "2026-11-25 07:00:03 [scrapy.core.engine] INFO: Closing spider (finished)\n"
    )
    assert log_levels(text) == {"DEBUG": 0, "INFO": 2, "WARNING": 1, "ERROR": 1, "CRITICAL": 0}


def test_processes_of_a_scrapyd_that_stopped_answering_become_lost(
    manager: Manager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watcher, "SCRAPYD_LOST_SECONDS", 0.5)
    admin = manager.as_("admin")
    r = manager.client.post(
        "/api/v1/scrapyd",
        json={"name": "gone", "url": "http://127.0.0.1:1", "check": False},
        headers=admin,
    )
    assert r.status_code == 200, r.text
    pid = record_process(manager.db, "news", "gone", "proj", "site", "abc123", "admin-1")
    manager.wait_for(
        "lost",
        lambda: list_processes(manager.db, "news")[0]["state"] == "lost",
        timeout=10,
    )
    (p,) = list_processes(manager.db, "news")
    assert p["id"] == pid and "unreachable for" in p["note"] and p["finished_at"]
    # a registration check that fails registers nothing
    r = manager.client.post(
        "/api/v1/scrapyd", json={"name": "x", "url": "http://127.0.0.1:1"}, headers=admin
    )
    assert r.status_code == 400 and "unreachable" in r.json()["error"]["message"]
    names = [n["name"] for n in manager.get("/api/v1/scrapyd")["scrapyd"]]
    assert names == ["gone"]
