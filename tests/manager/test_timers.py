"""Timers: validated when made, fired once per due time with two managers running, and
due times that passed while no manager ran recorded as missed."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from crawlfleet.frontier.records import counter_value
from crawlfleet.manager.app import create_app
from crawlfleet.redis.keys import JobKeys
from crawlfleet.state.db import StateDB
from crawlfleet.state.models import Timer, utcnow
from tests.support.manager import Manager, manager_settings


def fires(m: Manager, name: str) -> list[dict]:  # type: ignore[type-arg]
    return m.get(f"/api/v1/timers/{name}/fires")["fires"]  # type: ignore[no-any-return]


def test_a_timer_is_checked_when_made(manager: Manager) -> None:
    op = manager.as_("operator")
    base = {"name": "nightly", "job": "news", "action": "pause", "cron": "0 3 * * *"}
    for change, status, words in [
        ({"cron": "every night"}, 400, "cron 'every night' is not valid"),
        ({"action": "explode"}, 400, "action"),
        ({"action": "run"}, 400, "'run' (spider, project, nodes...) goes with action run"),
        ({"name": "a b"}, 400, "timer name 'a b' is not valid"),
        ({"job": "a b"}, 400, "job name"),
    ]:
        r = manager.client.post("/api/v1/timers", json={**base, **change}, headers=op)
        assert r.status_code == status and words in r.json()["error"]["message"], r.text
    viewer = manager.client.post("/api/v1/timers", json=base, headers=manager.as_("viewer"))
    assert viewer.status_code == 403
    assert manager.get("/api/v1/timers")["timers"] == []
    made = manager.client.post("/api/v1/timers", json=base, headers=op).json()
    assert made["next_fire_at"].endswith("03:00:00Z") and made["enabled"]
    again = manager.client.post("/api/v1/timers", json=base, headers=op)
    assert "already named 'nightly'" in again.json()["error"]["message"]
    off = manager.client.patch("/api/v1/timers/nightly", json={"enabled": False}, headers=op)
    assert off.json()["enabled"] is False and off.json()["next_fire_at"] is None
    assert manager.client.delete("/api/v1/timers/nightly", headers=op).status_code == 200
    run = {
        "spider": "s",
        "project": "p",
        "settings": {"CRAWLFLEET_REDIS_URL": "redis://:pw123@r:6379"},
    }
    made = manager.client.post(
        "/api/v1/timers", json={**base, "action": "run", "run": run}, headers=op
    )
    assert made.status_code == 200 and "pw123" not in made.text
    assert "pw123" not in manager.client.get("/api/v1/timers", headers=op).text
    assert "pw123" not in manager.client.get("/api/v1/events", headers=op).text
    manager.client.delete("/api/v1/timers/nightly", headers=op)
    assert manager.client.delete("/api/v1/timers/nightly", headers=op).status_code == 404


@pytest.fixture
def second_manager(manager: Manager, tmp_path: Path) -> Iterator[TestClient]:
    """Another manager process's app on the same Redis and state DB."""
    db = StateDB.open(manager.db.engine.url.render_as_string(hide_password=False))
    settings = manager_settings(manager.prefix, CRAWLFLEET_MANAGER_WATCH_SECONDS=0.2)
    with TestClient(create_app(settings, manager.redis_url, db)) as client:
        yield client


def test_two_managers_fire_each_due_time_once(
    manager: Manager, second_manager: TestClient, sync_redis: object
) -> None:
    op = manager.as_("operator")
    manager.beat("news", "n1")
    timer = {"name": "tick", "job": "news", "action": "pause", "cron": "* * * * * *"}
    assert manager.client.post("/api/v1/timers", json=timer, headers=op).status_code == 200
    manager.wait_for("3 fires", lambda: len(fires(manager, "tick")) >= 3, timeout=15)
    manager.client.patch("/api/v1/timers/tick", json={"enabled": False}, headers=op)
    done = fires(manager, "tick")
    assert {f["outcome"] for f in done} == {"fired"}
    assert len({f["due_at"] for f in done}) == len(done)  # no due time fired twice
    # each fire sent one command: the job's command sequence counts them
    seq = counter_value(sync_redis.hget(JobKeys.of(manager.prefix, "news").counters, "control_seq"))  # type: ignore[attr-defined]
    assert seq == len(done)
    events = manager.get("/api/v1/jobs/news/events")["events"]
    controls = [e for e in events if e["action"] == "job.control"]
    assert len(controls) == len(done) and {e["actor"] for e in controls} == {"timer:tick"}


def test_due_times_that_passed_with_no_manager_are_missed_not_dropped(manager: Manager) -> None:
    op = manager.as_("operator")
    manager.beat("news", "n1")
    # hourly at half an hour from now: the newest due time that passed is ~30 min old,
    # well past the grace in which a late due time is still fired
    minute = (utcnow().minute + 30) % 60
    timer = {"name": "hourly", "job": "news", "action": "resume", "cron": f"{minute} * * * *"}
    manager.client.post("/api/v1/timers", json=timer, headers=op).raise_for_status()
    long_ago = utcnow().replace(minute=minute, second=0, microsecond=0) - timedelta(hours=5)
    with manager.db.session() as s:  # as if every manager had been down for five hours
        s.execute(update(Timer).where(Timer.name == "hourly").values(next_fire_at=long_ago))
    manager.wait_for("recorded", lambda: len(fires(manager, "hourly")) >= 1, timeout=10)
    (missed,) = fires(manager, "hourly")
    assert missed["outcome"] == "missed" and missed["fired_at"] is None
    assert "5 due time(s)" in missed["detail"] or "6 due time(s)" in missed["detail"]
    nxt = manager.get("/api/v1/timers")["timers"][0]["next_fire_at"]
    assert nxt > utcnow().isoformat()  # goes on from now
