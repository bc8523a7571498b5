"""The manager's API v1 in-process, on the real Redis of the tests and a SQLite state DB:
auth that changes nothing when it refuses, one error shape, and jobs steered through the
same functions as the CLI."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient

from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.manager.app import create_app
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.state.db import StateDB
from crawlfleet.state.events import list_events
from crawlfleet.state.tokens import create_token, revoke_token
from tests.support.manager import Manager, assert_error, manager_settings

SEEDS = [f"http://site{i % 3}.test/page/{i}" for i in range(12)]


def api_routes(m: Manager) -> list[tuple[str, str]]:
    """(method, path with sample parameters) of every /api/ endpoint of the spec."""
    out = []
    for path, methods in m.client.get("/openapi.json").json()["paths"].items():
        if path.startswith("/api/"):
            sample = path.replace("{job}", "news").replace("{node}", "n1")
            out += [(method.upper(), sample) for method in sorted(methods)]
    return out


def test_health_and_openapi_need_no_token_and_no_cdn(manager: Manager) -> None:
    r = manager.client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok", "redis": "ok", "state_db": "ok"}
    spec = manager.client.get("/openapi.json").json()
    for path in ("/api/v1/jobs", "/api/v1/jobs/{job}/control", "/api/v1/nodes"):
        assert path in spec["paths"]
    assert "HTTPBearer" in spec["components"]["securitySchemes"]
    assert manager.client.get("/docs").status_code == 404  # its assets would come from a CDN


def test_every_api_endpoint_refuses_a_missing_wrong_or_revoked_token(manager: Manager) -> None:
    routes = api_routes(manager)
    assert len(routes) >= 10
    revoked = create_token(manager.db, "gone", "admin")
    revoke_token(manager.db, "gone")
    for headers in (
        {},
        {"Authorization": "Bearer cft_wrong"},
        {"Authorization": f"Basic {manager.tokens['admin']}"},
        {"Authorization": f"Bearer {revoked}"},
    ):
        for method, path in routes:
            r = manager.client.request(method, path, headers=headers, json={})
            error = assert_error(r, 401, "unauthorized")
            assert r.headers["WWW-Authenticate"] == "Bearer", (method, path)
            assert manager.tokens["admin"] not in error["message"]
            # one failed sign-in a route, forgiven: every route is asked (the slowing of
            # failed sign-ins has a test of its own)
            manager.app.state.ctx.sign_ins.succeeded("testclient")


def test_a_viewer_reads_but_changes_nothing(manager: Manager, sync_redis: redis.Redis) -> None:
    manager.client.post(
        "/api/v1/jobs/news/seeds", json={"seeds": SEEDS[:2]}, headers=manager.as_("operator")
    ).raise_for_status()
    before = {k: sync_redis.dump(k) for k in sync_redis.scan_iter(f"{manager.prefix}:*")}
    events_before = len(list_events(manager.db))
    viewer = manager.as_("viewer")
    assert manager.client.get("/api/v1/jobs/news", headers=viewer).status_code == 200
    for method, path, body in [
        ("POST", "/api/v1/jobs/news/seeds", {"seeds": SEEDS}),
        ("POST", "/api/v1/jobs/news/control", {"command": "pause"}),
        ("PUT", "/api/v1/jobs/news/limits", {"limits": {"*": "1/1s"}}),
        ("DELETE", "/api/v1/jobs/news/limits", None),
        ("PUT", "/api/v1/limits", {"limits": {"*": "1/1s"}}),
        ("DELETE", "/api/v1/limits", None),
        ("POST", "/api/v1/jobs/news/reset", {"force": True}),
        ("POST", "/api/v1/nodes/n1/control", {"command": "stop"}),
    ]:
        r = manager.client.request(method, path, json=body, headers=viewer)
        error = assert_error(r, 403, "forbidden")
        assert "operator needed" in error["message"]
    after = {k: sync_redis.dump(k) for k in sync_redis.scan_iter(f"{manager.prefix}:*")}
    assert after == before
    assert len(list_events(manager.db)) == events_before


def test_seeds_then_the_job_and_its_figures(manager: Manager) -> None:
    op = manager.as_("operator")
    r = manager.client.post(
        "/api/v1/jobs/news/seeds", json={"seeds": [*SEEDS, "not a url"]}, headers=op
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["queued"], body["duplicates"]) == (12, 0)
    assert [i["entry"] for i in body["invalid"]] == [13]
    again = manager.client.post("/api/v1/jobs/news/seeds", json={"seeds": SEEDS[:5]}, headers=op)
    assert (again.json()["queued"], again.json()["duplicates"]) == (0, 5)
    jobs = manager.client.get("/api/v1/jobs", headers=manager.as_("viewer")).json()["jobs"]
    assert [(j["job"], j["queued"], j["state"]) for j in jobs] == [("news", 12, "waiting")]
    job = manager.client.get("/api/v1/jobs/news", headers=manager.as_("viewer")).json()
    assert job["queued"] == 12 and job["leased"] == 0 and job["live_nodes"] == 0
    assert sorted(s["site"] for s in job["top_sites"]) == ["site0.test", "site1.test", "site2.test"]
    assert job["eta_seconds"] is None and job["eta_limited_by"] == "unknown"
    bad = manager.client.post("/api/v1/jobs/news/seeds", json={"seeds": ["nope"]}, headers=op)
    assert "no valid seed" in assert_error(bad, 400, "invalid")["message"]
    empty = manager.client.post("/api/v1/jobs/news/seeds", json={"seeds": []}, headers=op)
    assert_error(empty, 400, "invalid_request")


def test_a_sharded_job_is_seen_and_seeded_whole(manager: Manager) -> None:
    async def create() -> None:  # a job created by a node configured with 3 shards
        client = make_client(manager.redis_url)
        try:
            await JobFrontier(client, JobKeys.of(manager.prefix, "wide"), shards=3).register_job()
        finally:
            await client.aclose()

    asyncio.run(create())
    op, viewer = manager.as_("operator"), manager.as_("viewer")
    r = manager.client.post("/api/v1/jobs/wide/seeds", json={"seeds": SEEDS}, headers=op)
    assert r.json()["queued"] == 12, r.text
    job = manager.client.get("/api/v1/jobs/wide", headers=viewer).json()
    assert (job["shards"], job["queued"], job["sites"]) == (3, 12, 3)
    assert sorted(s["site"] for s in job["top_sites"]) == ["site0.test", "site1.test", "site2.test"]
    assert job["counters"]["enqueued"] == 12


def test_unknown_jobs_bad_names_and_bad_bodies_get_one_error_shape(manager: Manager) -> None:
    viewer, op = manager.as_("viewer"), manager.as_("operator")
    error = assert_error(
        manager.client.get("/api/v1/jobs/ghost", headers=viewer), 404, "unknown_job"
    )
    assert "no job 'ghost'" in error["message"]
    assert_error(manager.client.get("/api/v1/jobs/a{b}", headers=viewer), 400, "invalid")
    r = manager.client.post("/api/v1/jobs/ghost/control", json={"command": "pause"}, headers=op)
    assert_error(r, 404, "unknown_job")
    r = manager.client.post("/api/v1/jobs/ghost/control", json={"command": "explode"}, headers=op)
    assert "command" in assert_error(r, 400, "invalid_request")["message"]
    r = manager.client.post(
        "/api/v1/jobs/ghost/control", json={"command": "pause", "extra": 1}, headers=op
    )
    assert "extra" in assert_error(r, 400, "invalid_request")["message"]
    r = manager.client.post("/api/v1/jobs/ghost/reset", content=b"{not json", headers=op)
    assert_error(r, 400, "invalid_request")
    assert_error(manager.client.get("/api/v1/nope", headers=viewer), 404, "not_found")


def test_limits_set_read_and_lifted(manager: Manager) -> None:
    op = manager.as_("operator")
    r = manager.client.put(
        "/api/v1/jobs/news/limits",
        json={"limits": {"*.Example.com": " 2/1s", "*": "30/1m"}},
        headers=op,
    )
    assert r.json()["limits"] == {"*.example.com": "2/1s", "*": "30/1m"}
    bad = manager.client.put(
        "/api/v1/jobs/news/limits",
        json={"limits": {"a.test": "1/1s", "b.test": "fast"}},
        headers=op,
    )
    assert "b.test" in assert_error(bad, 400, "invalid")["message"]
    got = manager.client.get("/api/v1/jobs/news/limits", headers=manager.as_("viewer")).json()
    assert got["limits"] == {"*.example.com": "2/1s", "*": "30/1m"}  # none of the bad call
    one = manager.client.delete(
        "/api/v1/jobs/news/limits", params={"pattern": "*.EXAMPLE.com"}, headers=op
    )
    assert one.json()["limits"] == {"*": "30/1m"}
    assert manager.client.delete("/api/v1/jobs/news/limits", headers=op).json()["limits"] == {}


def test_fleet_limits_are_apart_from_a_jobs_own_and_audited(manager: Manager) -> None:
    op, viewer = manager.as_("operator"), manager.as_("viewer")
    r = manager.client.put("/api/v1/limits", json={"limits": {"*.Shop.com": "5/1s"}}, headers=op)
    assert r.json() == {"limits": {"*.shop.com": "5/1s"}}
    manager.client.put(
        "/api/v1/jobs/news/limits", json={"limits": {"*": "1/1s"}}, headers=op
    ).raise_for_status()
    assert manager.client.get("/api/v1/limits", headers=viewer).json() == {
        "limits": {"*.shop.com": "5/1s"}
    }
    bad = manager.client.put("/api/v1/limits", json={"limits": {"x.org": "fast"}}, headers=op)
    assert "x.org" in assert_error(bad, 400, "invalid")["message"]
    r = manager.client.delete("/api/v1/limits", params={"pattern": "*.shop.com"}, headers=op)
    assert r.json() == {"limits": {}}
    actions = [e["action"] for e in list_events(manager.db)]
    assert "fleet.limits.set" in actions and "fleet.limits.unset" in actions


def test_control_reaches_the_nodes_and_is_audited(manager: Manager) -> None:
    op = manager.as_("operator")
    manager.client.post("/api/v1/jobs/news/seeds", json={"seeds": SEEDS}, headers=op)
    manager.beat("news", "n1")
    manager.beat("news", "n2")
    r = manager.client.post("/api/v1/jobs/news/control", json={"command": "pause"}, headers=op)
    assert r.status_code == 200, r.text
    (sent,) = r.json()["sent"]
    assert sent["live_nodes"] == 2 and sorted(sent["targets"]) == ["n1", "n2"]
    job = manager.client.get("/api/v1/jobs/news", headers=op).json()
    assert job["job_control"]["state"] == "paused" and job["state"] == "paused"
    assert job["eta_limited_by"] == "paused"
    # a node that acknowledges in its status, one that does not: waited for, reported
    manager.beat("news", "n1", state="paused")
    conc = manager.client.post(
        "/api/v1/jobs/news/control",
        json={"command": "concurrency", "value": 3, "wait_seconds": 0.5},
        headers=op,
    ).json()["sent"][0]
    assert conc["value"] == "3" and sorted(conc["pending"]) == ["n1", "n2"]  # no ack yet
    bad = manager.client.post(
        "/api/v1/jobs/news/control", json={"command": "concurrency", "value": 0}, headers=op
    )
    assert "between 1 and 10000" in assert_error(bad, 400, "invalid")["message"]
    nodes = manager.client.get("/api/v1/nodes", headers=op).json()["nodes"]
    assert [(n["job"], n["node"], n["alive"]) for n in nodes] == [
        ("news", "n1", True),
        ("news", "n2", True),
    ]
    one = manager.client.post("/api/v1/nodes/n2/control", json={"command": "stop"}, headers=op)
    assert one.json()["sent"][0]["targets"] == ["n2"]
    r = manager.client.post("/api/v1/nodes/n9/control", json={"command": "stop"}, headers=op)
    assert_error(r, 404, "not_found")
    events = manager.client.get("/api/v1/jobs/news/events", headers=op).json()["events"]
    assert [(e["actor"], e["action"], e["detail"].get("command")) for e in events] == [
        ("operator-1", "node.control", "stop"),
        ("operator-1", "job.control", "concurrency"),
        ("operator-1", "job.control", "pause"),
        ("operator-1", "job.seeds", None),
    ]


def test_reset_is_refused_while_nodes_live_and_changes_nothing(
    manager: Manager, sync_redis: redis.Redis
) -> None:
    op = manager.as_("operator")
    manager.client.post("/api/v1/jobs/news/seeds", json={"seeds": SEEDS}, headers=op)
    manager.client.put("/api/v1/jobs/news/limits", json={"limits": {"*": "5/1s"}}, headers=op)
    manager.beat("news", "n1")
    keys_before = sorted(sync_redis.scan_iter(f"{manager.prefix}:*"))
    r = manager.client.post("/api/v1/jobs/news/reset", json={}, headers=op)
    error = assert_error(r, 409, "refused")
    assert "live nodes n1" in error["message"] and '"force": true' in error["message"]
    assert sorted(sync_redis.scan_iter(f"{manager.prefix}:*")) == keys_before
    r = manager.client.post(
        "/api/v1/jobs/news/reset", json={"force": True, "keep_limits": True}, headers=op
    )
    assert r.status_code == 200 and r.json()["deleted"] > 0 and r.json()["kept_limits"]
    got = manager.client.get("/api/v1/jobs/news/limits", headers=op)
    assert got.status_code == 200 and got.json()["limits"] == {"*": "5/1s"}


def test_redis_down_is_a_503_that_names_no_secret(key_prefix: str, tmp_path: Path) -> None:
    db = StateDB.open(f"sqlite:///{tmp_path / 'state.sqlite3'}")
    db.upgrade()
    token = create_token(db, "ops", "operator")
    app = create_app(manager_settings(key_prefix), "redis://:sekret@127.0.0.1:1/0", db)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        health = client.get("/healthz")
        assert health.status_code == 503 and health.json()["redis"].startswith("unavailable")
        auth = {"Authorization": f"Bearer {token}"}
        for method, path in [("GET", "/api/v1/jobs"), ("POST", "/api/v1/jobs/news/control")]:
            r = client.request(method, path, json={"command": "pause"}, headers=auth)
            assert_error(r, 503, "redis_unavailable")
            assert "sekret" not in r.text
        assert list_events(db) == []  # the refused change is not recorded as done


@pytest.mark.parametrize("setting", [{"CRAWLFLEET_SEEN_MODE": "fuzzy"}])
def test_a_wrong_setting_stops_the_app_before_it_serves(
    key_prefix: str, tmp_path: Path, redis_server_url: str, setting: dict[str, str]
) -> None:
    from crawlfleet.exceptions import ConfigError

    db = StateDB.open(f"sqlite:///{tmp_path / 'state.sqlite3'}")
    with pytest.raises(ConfigError, match="CRAWLFLEET_SEEN_MODE"):
        create_app(manager_settings(key_prefix, **setting), redis_server_url, db)
