"""The manager's edge under abuse: bodies bounded and the caller known before a body is
read, names and numbers checked on every route, and every refusal a JSON error with the
security headers. In-process here; tests/manager/test_edge_serve.py does the same to a
real uvicorn and watches its memory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from crawlfleet.manager.edge import SECURITY_HEADERS
from tests.support.manager import Manager, assert_error, manager_settings

SQLITE = pytest.mark.parametrize("manager", ["sqlite"], indirect=True)
MIB = 2**20


def refused(response: Any, status: int, code: str) -> dict[str, Any]:
    """*response* is a JSON error with every security header."""
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get(name) == value, (name, response.headers)
    return assert_error(response, status, code)


def chunks(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    """*total* bytes sent without a Content-Length (chunked), counted as they go."""
    sent = 0
    while sent < total:
        piece = min(size, total - sent)
        sent += piece
        yield b"x" * piece


@SQLITE
def test_a_declared_length_over_the_bound_is_413_whoever_sends_it(manager: Manager) -> None:
    for headers in ({}, manager.as_("viewer"), manager.as_("operator")):
        r = manager.client.post(
            "/api/v1/jobs/j/seeds",
            content=b"{}",
            headers={**headers, "Content-Length": str(200 * MIB)},
        )
        assert "1 MiB" in refused(r, 413, "too_large")["message"]


@SQLITE
def test_a_body_from_an_unknown_caller_is_refused_before_it_is_read(manager: Manager) -> None:
    sent: list[int] = []

    def counted() -> Iterator[bytes]:
        for piece in chunks(50 * MIB):
            sent.append(len(piece))
            yield piece

    r = manager.client.post("/api/v1/jobs/j/seeds", content=counted())
    refused(r, 401, "unauthorized")
    assert sum(sent) <= 2 * 64 * 1024  # the client's first pieces, not 50 MB
    bad = manager.client.post(
        "/api/v1/jobs/j/seeds", json={"seeds": ["http://a/"]}, headers={"Authorization": "Bearer x"}
    )
    refused(bad, 401, "unauthorized")


@SQLITE
def test_a_body_without_a_length_is_cut_at_the_bound(manager: Manager) -> None:
    r = manager.client.post(
        "/api/v1/jobs/j/seeds", content=chunks(50 * MIB), headers=manager.as_("operator")
    )
    refused(r, 413, "too_large")
    # the sign-in has its own small bound: its body is read before anyone is known
    big = manager.client.post("/session", content=chunks(MIB))
    refused(big, 413, "too_large")
    ok = manager.client.post("/session", json={"token": manager.tokens["viewer"]})
    assert ok.status_code == 200


@SQLITE
def test_the_bound_is_a_setting(manager: Manager) -> None:
    from fastapi.testclient import TestClient

    from crawlfleet.manager.app import create_app

    settings = manager_settings(manager.prefix, CRAWLFLEET_MANAGER_MAX_BODY=4096)
    app = create_app(settings, manager.redis_url, manager.db)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        seeds = {"seeds": [f"http://a.example/{i}" for i in range(400)]}
        r = client.post("/api/v1/jobs/j/seeds", json=seeds, headers=manager.as_("operator"))
        assert "4 KiB" in refused(r, 413, "too_large")["message"]
    bad = manager_settings(manager.prefix, CRAWLFLEET_MANAGER_MAX_BODY="lots")
    with pytest.raises(Exception, match="CRAWLFLEET_MANAGER_MAX_BODY must be an integer"):
        create_app(bad, manager.redis_url, manager.db)


@SQLITE
def test_seed_answers_never_echo_the_input(manager: Manager) -> None:
    op = manager.as_("operator")
    long = "http://a.example/" + "x" * 9000
    r = manager.client.post("/api/v1/jobs/j/seeds", json={"seeds": [long]}, headers=op)
    assert len(refused(r, 400, "invalid_request")["message"]) < 600 and "xxxxxxxx" not in r.text
    bad = [f"ftp://a.example/{'y' * 500}{i}" for i in range(100)]
    r = manager.client.post(
        "/api/v1/jobs/j/seeds", json={"seeds": [*bad, "http://a.example/"]}, headers=op
    )
    body = r.json()
    assert r.status_code == 200 and body["queued"] == 1
    assert body["invalid_count"] == 100 and len(body["invalid"]) == 20
    assert all(len(i["text"]) <= 200 and len(i["error"]) <= 200 for i in body["invalid"])
    assert len(r.content) < 20_000


@SQLITE
def test_names_are_checked_on_every_route(manager: Manager) -> None:
    admin, op, viewer = manager.as_("admin"), manager.as_("operator"), manager.as_("viewer")
    for project, version, code in (
        (".", "1", "invalid"),
        ("..", "1", "invalid"),
        ("...", "1", "invalid"),
        ("p", "..", "invalid"),
        ("a/b", "1", "invalid_request"),  # not of the project pattern
    ):
        r = manager.client.post(
            "/api/v1/deploy",
            params={"project": project, "version": version},
            content=b"egg",
            headers=admin,
        )
        refused(r, 400, code)
    for job in ("%2E%2E", "%2E", "a%01b", "a%0Ab"):
        refused(manager.client.get(f"/api/v1/jobs/{job}", headers=viewer), 400, "invalid")
        refused(manager.client.get(f"/api/v1/jobs/{job}/errors", headers=viewer), 400, "invalid")
    run = {"spider": "..", "project": "p"}
    refused(manager.client.post("/api/v1/jobs/j/run", json=run, headers=op), 400, "invalid")
    # a run's crawlfleet settings are checked as a node would, before any is started
    for settings, named in (
        ({"CRAWLFLEET_REVISIT": "adaptiv"}, "CRAWLFLEET_REVISIT"),
        ({"CRAWLFLEET_REVSIT": "fixed"}, "CRAWLFLEET_REVSIT"),
        ({"CRAWLFLEET_REVISIT_MIN_SECONDS": "-1"}, "CRAWLFLEET_REVISIT_MIN_SECONDS"),
    ):
        run = {"spider": "s", "project": "p", "settings": settings}
        r = manager.client.post("/api/v1/jobs/j/run", json=run, headers=op)
        assert named in str(refused(r, 400, "invalid")), r.json()
    timer = {"name": "t", "job": "..", "action": "pause", "cron": "0 3 * * *"}
    refused(manager.client.post("/api/v1/timers", json=timer, headers=op), 400, "invalid")
    refused(manager.client.delete("/api/v1/timers/%2E%2E", headers=op), 400, "invalid")
    refused(manager.client.delete("/api/v1/timers/" + "t" * 65, headers=op), 400, "invalid_request")
    # well-formed names of things that do not exist: 404
    refused(manager.client.delete("/api/v1/timers/ghost", headers=op), 404, "not_found")
    refused(manager.client.delete("/api/v1/alerts/rules/ghost", headers=admin), 404, "not_found")
    refused(manager.client.delete("/api/v1/scrapyd/ghost", headers=admin), 404, "not_found")
    refused(manager.client.get("/api/v1/campaigns/ghost", headers=viewer), 404, "not_found")


@SQLITE
def test_numbers_out_of_range_are_400_in_json(manager: Manager) -> None:
    viewer, op = manager.as_("viewer"), manager.as_("operator")
    huge = "99999999999999999999"
    manager.client.post("/api/v1/jobs/j/seeds", json={"seeds": ["http://a.example/"]}, headers=op)
    for path in (
        f"/api/v1/jobs/j/errors?offset={huge}",
        f"/api/v1/jobs/j/processes/{huge}/log",
        "/api/v1/jobs/j/processes/0/log",
        f"/api/v1/events?limit={huge}",
    ):
        refused(manager.client.get(path, headers=viewer), 400, "invalid_request")
    r = manager.client.post(f"/api/v1/jobs/j/processes/{huge}/cancel", json={}, headers=op)
    refused(r, 400, "invalid_request")


@SQLITE
def test_an_unexpected_failure_is_a_json_500_with_the_headers(
    manager: Manager, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken() -> None:
        raise RuntimeError("a bug, with a secret: redis://:hunter2@h/0")

    manager.app.add_api_route("/api/v1/broken-for-test", broken)
    r = manager.client.get("/api/v1/broken-for-test")
    error = refused(r, 500, "internal_error")
    assert "hunter2" not in r.text and "logged" in error["message"]
    logged = [r.getMessage() for r in caplog.records if r.name == "crawlfleet.manager.edge"]
    assert len(logged) == 1 and "RuntimeError: a bug" in logged[0], logged
    assert "hunter2" not in caplog.text
