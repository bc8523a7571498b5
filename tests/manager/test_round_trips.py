"""The pages the dashboard polls read Redis in a few round trips, as many for ten jobs as
for one (a manager a network hop from Redis pays each round trip in full): counted on
the manager's connections to the real Redis of the tests, not timed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis.asyncio.connection import Connection

from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.manager import app as app_module
from crawlfleet.manager.app import create_app
from crawlfleet.manager.context import ManagerContext
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.state.db import StateDB
from crawlfleet.state.tokens import create_token
from tests.support.manager import ROLES, Manager, manager_settings

SEEDS = [f"http://site{i % 3}.test/page/{i}" for i in range(12)]
PAGES = ("/api/v1/jobs", "/api/v1/jobs/job0", "/api/v1/nodes")


async def no_watch(ctx: ManagerContext, interval: float) -> None:
    """The manager's watch, left out: only the requests counted talk to Redis."""
    await asyncio.sleep(3600)


@pytest.fixture
def counted(
    redis_server_url: str, key_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Manager, list[int]]]:
    """A manager without its watch, and the count of what this process has sent to
    Redis (a command, or a pipeline: one round trip each)."""
    sent = [0]
    send = Connection.send_packed_command

    async def counting(self: Connection, command: Any, check_health: bool = True) -> None:
        sent[0] += 1
        await send(self, command, check_health)

    monkeypatch.setattr(Connection, "send_packed_command", counting)
    monkeypatch.setattr(app_module, "watch", no_watch)
    db = StateDB.open(f"sqlite:///{tmp_path / 'state.db'}")
    db.upgrade()
    tokens = {role: create_token(db, f"{role}-1", role) for role in ROLES}
    app = create_app(manager_settings(key_prefix), redis_server_url, db)
    try:
        with TestClient(app, base_url="http://127.0.0.1") as client:
            yield Manager(app, client, db, redis_server_url, key_prefix, tokens), sent
    finally:
        db.close()


def test_the_polled_pages_take_as_many_round_trips_for_ten_jobs_as_for_one(
    counted: tuple[Manager, list[int]],
) -> None:
    manager, sent = counted
    op = manager.as_("operator")

    def seed(job: str) -> None:
        r = manager.client.post(f"/api/v1/jobs/{job}/seeds", json={"seeds": SEEDS}, headers=op)
        assert r.json()["queued"] == 12, r.text

    def trips() -> dict[str, int]:
        out = {}
        for page in PAGES:
            manager.get(page)  # connections opened (the pool grows to what a page needs)
            manager.app.state.ctx.figures.forget()  # read Redis, not the shared figures
            before = sent[0]
            manager.get(page)
            out[page] = sent[0] - before
        return out

    seed("job0")
    manager.beat("job0", "n1")
    one = trips()
    for i in range(1, 10):
        seed(f"job{i}")
    manager.beat("job0", "n2")
    manager.beat("job3", "n3")
    ten = trips()
    jobs = manager.get("/api/v1/jobs")["jobs"]
    assert [(j["job"], j["queued"], j["live_nodes"]) for j in jobs[:4]] == [
        ("job0", 12, 2),
        ("job1", 12, 0),
        ("job2", 12, 0),
        ("job3", 12, 1),
    ]
    assert len(jobs) == 10 and len(manager.get("/api/v1/nodes")["nodes"]) == 3
    # the list of jobs, then their keys (beside Redis's clock), then their sites' queues
    assert ten == one and max(ten.values()) <= 4, (one, ten)

    async def shard() -> None:  # a job created by a node configured with 3 shards
        client = make_client(manager.redis_url)
        try:
            await JobFrontier(client, JobKeys.of(manager.prefix, "wide"), shards=3).register_job()
        finally:
            await client.aclose()

    asyncio.run(shard())
    seed("wide")
    # its other shards, then the queues of all its sites: one round trip more
    assert trips()["/api/v1/jobs"] <= 5
