"""The dashboard's server side, in-process: sign-in sessions (HttpOnly, SameSite cookie),
CSRF checks on every change made through a session, sign-out and revocation, the page
and its assets with their security headers, and the live event stream."""

from __future__ import annotations

import asyncio
import gzip
import json
import math
import re
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from crawlfleet.fleet.snapshot import JobSnapshot
from crawlfleet.manager.callers import CALLER_SECONDS
from crawlfleet.manager.routes.jobs import live_figures, site_figures
from crawlfleet.manager.shared import FRESH_SECONDS, Shared
from crawlfleet.manager.signin import FIRST_WAIT_SECONDS, FREE_FAILURES
from crawlfleet.manager.web import ASSETS
from crawlfleet.state.sessions import session_of, start_session
from crawlfleet.state.tokens import revoke_token
from tests.support.manager import Manager


class Browser:
    """Requests as a browser makes them: the session cookie and no Authorization header
    (through the manager's one in-process client, whose own cookie jar stays empty)."""

    def __init__(self, client: TestClient, sid: str | None = None) -> None:
        self.client = client
        self.sid = sid

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = dict(kwargs.pop("headers", None) or {})
        if self.sid is not None:
            headers["Cookie"] = f"crawlfleet_session={self.sid}"
        try:
            response = self.client.request(method, path, headers=headers, **kwargs)
        finally:
            self.client.cookies.clear()
        set_cookie = response.headers.get("set-cookie", "")
        found = re.match(r'crawlfleet_session="?([^;"]*)"?', set_cookie)
        if found:
            self.sid = found.group(1) or None
        return response

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.request("POST", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.request("DELETE", path, **kwargs)


def sign_in(manager: Manager, role: str) -> tuple[Browser, str]:
    """A browser signed in with *role*'s token: (browser, its CSRF token)."""
    browser = Browser(manager.client)
    r = browser.post("/session", json={"token": manager.tokens[role]})
    assert r.status_code == 200, r.text
    return browser, r.json()["csrf"]


def queued(manager: Manager, job: str) -> int:
    r = manager.client.get(f"/api/v1/jobs/{job}", headers=manager.as_("viewer"))
    return int(r.json()["queued"]) if r.status_code == 200 else 0


def test_sign_in_sets_a_strict_http_only_session_cookie(manager: Manager) -> None:
    client = Browser(manager.client)
    r = client.post("/session", json={"token": manager.tokens["operator"]})
    assert r.status_code == 200
    assert r.json()["name"] == "operator-1" and r.json()["role"] == "operator"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith("crawlfleet_session=")
    for flag in ("HttpOnly", "SameSite=strict", "Path=/", "Max-Age=43200"):
        assert flag in cookie, cookie
    assert "Secure" not in cookie  # plain HTTP on loopback; set over HTTPS
    assert manager.tokens["operator"] not in cookie  # the cookie is a session, not the token
    assert client.get("/session").json()["csrf"] == r.json()["csrf"]
    assert client.get("/api/v1/jobs").status_code == 200  # reads need no CSRF token

    for wrong in ("cft_nope", "", "x" * 201):
        r = Browser(manager.client).post("/session", json={"token": wrong})
        assert r.status_code in (401, 400) and "set-cookie" not in r.headers
        assert set(r.json()) == {"error"}
    assert Browser(manager.client).get("/session").status_code == 401


def test_failed_sign_ins_are_slowed_per_client_and_said(
    manager: Manager, caplog: pytest.LogCaptureFixture
) -> None:
    # 300 wrong tokens in a burst: the first FREE_FAILURES get their 401, then the client
    # waits longer and longer, refused at once (429 and Retry-After) while it waits
    guard = manager.app.state.ctx.sign_ins
    statuses: list[int] = []
    started = time.monotonic()
    with caplog.at_level("WARNING", logger="crawlfleet.manager.signin"):
        for n in range(300):
            r = Browser(manager.client).post("/session", json={"token": f"cft_guess{n}"})
            statuses.append(r.status_code)
            if r.status_code == 429:
                assert int(r.headers["Retry-After"]) >= 1
                assert r.json()["error"]["code"] == "too_many_requests"
    took = time.monotonic() - started
    assert statuses[: FREE_FAILURES + 2] == [401] * (FREE_FAILURES + 1) + [429]
    # then one guess a wait: 1 s, 2 s, 4 s ... (a slow machine may see a wait end)
    assert statuses.count(401) <= FREE_FAILURES + 1 + math.ceil(math.log2(took + 1)), took
    assert statuses.count(429) >= 300 - FREE_FAILURES - 1 - math.ceil(math.log2(took + 1))
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == "Failed sign-in from testclient (a token that is unknown or revoked)"
    assert said[1].startswith("6 failed sign-ins from testclient")
    assert len(said) == 2  # then once a minute at most
    # a wrong bearer token counts alike, and the right one waits too
    r = manager.client.get("/api/v1/jobs", headers={"Authorization": "Bearer cft_x"})
    assert r.status_code == 429
    r = Browser(manager.client).post("/session", json={"token": manager.tokens["viewer"]})
    assert r.status_code == 429
    # once the wait is over, the right token signs in and the client is forgiven
    assert guard.wait_left("testclient") <= 8 * FIRST_WAIT_SECONDS  # a few waits at most
    time.sleep(guard.wait_left("testclient"))
    r = Browser(manager.client).post("/session", json={"token": manager.tokens["viewer"]})
    assert r.status_code == 200
    assert guard.wait_left("testclient") == 0
    r = Browser(manager.client).post("/session", json={"token": "cft_again"})
    assert r.status_code == 401


def test_changes_through_a_session_need_its_csrf_token_and_origin(manager: Manager) -> None:
    client, csrf = sign_in(manager, "operator")
    body = {"seeds": ["http://127.0.0.1:9/a"]}
    for headers in (
        {},
        {"X-CSRF-Token": "wrong"},
        {"X-CSRF-Token": csrf, "Origin": "http://evil.example"},
    ):
        r = client.post("/api/v1/jobs/csrf-job/seeds", json=body, headers=headers)
        assert r.status_code == 403, (headers, r.text)
        assert queued(manager, "csrf-job") == 0  # nothing was queued
    r = client.post(
        "/api/v1/jobs/csrf-job/seeds",
        json=body,
        headers={"X-CSRF-Token": csrf, "Origin": "http://127.0.0.1"},
    )
    assert r.status_code == 200 and r.json()["queued"] == 1
    events = manager.get("/api/v1/jobs/csrf-job/events")["events"]
    assert [(e["actor"], e["action"]) for e in events] == [("operator-1", "job.seeds")]


def test_a_viewer_session_cannot_change_anything(manager: Manager) -> None:
    client, csrf = sign_in(manager, "viewer")
    r = client.post(
        "/api/v1/jobs/viewer-job/control", json={"command": "pause"}, headers={"X-CSRF-Token": csrf}
    )
    assert r.status_code == 403 and "operator needed" in r.json()["error"]["message"]
    assert client.get("/api/v1/nodes").status_code == 200


def test_sign_out_ends_the_session_and_a_revoked_token_ends_its_sessions(
    manager: Manager,
) -> None:
    client, csrf = sign_in(manager, "operator")
    sid = client.sid
    assert client.delete("/session").status_code == 403  # sign-out is a change: CSRF
    assert client.get("/session").status_code == 200
    r = client.delete("/session", headers={"X-CSRF-Token": csrf})
    assert r.status_code == 200 and r.json() == {"signed_out": True}
    assert 'crawlfleet_session=""' in r.headers["set-cookie"]
    assert client.sid is None
    stale = Browser(manager.client, sid)
    r = stale.get("/api/v1/jobs")
    assert r.status_code == 401 and "sign in again" in r.json()["error"]["message"]

    client, _ = sign_in(manager, "admin")
    assert client.get("/api/v1/jobs").status_code == 200
    revoke_token(manager.db, "admin-1")  # by the CLI: refused within CALLER_SECONDS
    deadline = time.monotonic() + CALLER_SECONDS + 1
    while client.get("/api/v1/jobs").status_code != 401:
        assert time.monotonic() < deadline, "a revoked token still works"
        time.sleep(0.1)
    assert client.get("/session").status_code == 401


def test_a_session_expires(manager: Manager) -> None:
    lasts = 2.0  # seconds: the first check comes well within it on a loaded machine
    begun = time.monotonic()
    started = start_session(manager.db, manager.tokens["viewer"], hours=lasts / 3600)
    assert started is not None
    sid, info = started
    assert session_of(manager.db, sid) == info
    time.sleep(max(0.0, begun + lasts + 0.1 - time.monotonic()))
    assert session_of(manager.db, sid) is None
    assert start_session(manager.db, "not-a-token", hours=1) is None


def test_the_page_and_its_assets_are_small_local_and_under_a_strict_csp(
    manager: Manager,
) -> None:
    client = manager.client
    page = client.get("/", headers={"Accept-Encoding": "gzip"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["x-content-type-options"] == "nosniff"
    html = page.text
    assert "<script>" not in html and " style=" not in html and " on" not in html.lower()
    referenced = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert referenced and all(ref.startswith(("/assets/", "#")) for ref in referenced), referenced
    transferred = len(gzip.compress(page.content))
    for name, media in ASSETS.items():
        r = client.get(f"/assets/{name}?v=0", headers={"Accept-Encoding": "gzip"})
        assert r.status_code == 200 and r.headers["content-type"] == media
        body = r.text
        # nothing is fetched from outside: the only absolute URL is the SVG namespace
        assert set(re.findall(r"https?://[^\s\"')]+", body)) <= {"http://www.w3.org/2000/svg"}
        assert "innerHTML" not in body and "eval(" not in body
        transferred += len(gzip.compress(r.content))
    assert transferred < 200_000, transferred
    assert client.get("/assets/../app.py").status_code == 404
    assert client.get("/assets/nothing.js").status_code == 404
    # the API answers carry the headers too
    assert "content-security-policy" in client.get("/healthz").headers


def events(body: str) -> list[tuple[str, Any]]:
    out = []
    for block in body.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            out.append((lines["event"], json.loads(lines["data"])))
    return out


def test_the_live_stream_sends_the_fleet_a_job_and_the_nodes(manager: Manager) -> None:
    manager.beat("live-job", "node-a")
    client, _ = sign_in(manager, "viewer")
    r = client.get("/api/v1/live?job=live-job&nodes=true&max_seconds=1.5")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    body = r.text
    got = events(body)
    names = [name for name, _ in got]
    assert names[:3] == ["fleet", "job", "nodes"] and names[-1] == "end"
    assert names.count("fleet") == 2  # one round a second
    first_fleet = got[0][1]
    assert "history" in first_fleet
    assert "history" not in got[3][1]
    (job,) = [j for j in first_fleet["jobs"] if j["job"] == "live-job"]
    assert job["state"] == "running" and job["live_nodes"] == 1
    assert job["live"]["pages_per_second"] == 1.0  # the beat's 60 pages/min
    assert got[1][1]["job"] == "live-job" and "node-a" in got[1][1]["nodes"]
    assert [n["node"] for n in got[2][1]["nodes"] if n["job"] == "live-job"] == ["node-a"]

    r = client.get("/api/v1/live?job=no-such-job&max_seconds=0.5")
    (job_event,) = [data for name, data in events(r.text) if name == "job"]
    assert "no job" in job_event["error"]
    assert client.get("/api/v1/live?job=bad%20name").status_code == 400
    assert Browser(manager.client).get("/api/v1/live?max_seconds=1").status_code == 401
    bearer = manager.client.get("/api/v1/live?max_seconds=0.5", headers=manager.as_("viewer"))
    assert bearer.status_code == 200 and events(bearer.text)[0][0] == "fleet"


@pytest.mark.parametrize("path", ["/", "/assets/app.js", "/session"])
def test_the_dashboard_is_not_in_the_api_spec_but_the_session_is(
    manager: Manager, path: str
) -> None:
    paths = manager.client.get("/openapi.json").json()["paths"]
    assert (path in paths) == (path == "/session")


def test_site_figures_add_up_the_live_nodes() -> None:
    def node(alive: bool, sites: Any) -> dict[str, Any]:
        return {"alive": alive, "sites": sites, "pages_per_min": 60, "errors": {"a": 1, "b": 2}}

    snap = JobSnapshot(
        job="j",
        now_ms=0,
        queued=0,
        leased=0,
        overdue_leases=0,
        oldest_deadline_ms=None,
        sites=0,
        top_sites=[],
        sites_scanned=0,
        malformed=0,
        nodes={
            "n1": node(True, {"a": {"leased": 2, "done_per_min": 60}, "b": {"leased": 1}}),
            "n2": node(True, {"a": {"leased": 3, "done_per_min": 30}, "c": "junk"}),
            "n3": node(False, {"a": {"leased": 100, "done_per_min": 600}}),  # dead: not live
            "n4": node(True, "not a dict"),
        },
    )
    assert site_figures(snap) == {
        "a": {"leased": 5, "per_second": 1.5},
        "b": {"leased": 1, "per_second": 0.0},
    }
    assert live_figures(snap)["pages_per_second"] == 3.0  # n1, n2, n4
    assert live_figures(snap)["errors"] == 9


def test_behind_a_tls_proxy_the_cookie_is_secure_and_the_origin_host_counts(
    manager: Manager,
) -> None:
    browser = Browser(manager.client)
    r = browser.post(
        "/session",
        json={"token": manager.tokens["operator"]},
        headers={"X-Forwarded-Proto": "https"},
    )
    assert "Secure" in r.headers["set-cookie"]
    csrf = r.json()["csrf"]
    body = {"seeds": ["http://127.0.0.1:9/tls"]}
    ok = browser.post(
        "/api/v1/jobs/tls/seeds",
        json=body,
        headers={"X-CSRF-Token": csrf, "Origin": "https://127.0.0.1"},
    )
    assert ok.status_code == 200  # the browser's https, the manager's http: one host
    other = browser.post(
        "/api/v1/jobs/tls/seeds",
        json=body,
        headers={"X-CSRF-Token": csrf, "Origin": "https://127.0.0.1.evil.example"},
    )
    assert other.status_code == 403


def test_assets_are_revalidated_by_their_etag(manager: Manager) -> None:
    first = manager.client.get("/assets/core.js")
    etag = first.headers["etag"]
    assert first.headers["cache-control"] == "no-cache" and first.text
    again = manager.client.get("/assets/core.js", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert manager.client.get("/assets/dom.js").headers["etag"] != etag


def test_requests_and_streams_share_one_rounds_figures() -> None:
    shared = Shared()
    made: list[int] = []

    async def make() -> int:
        made.append(1)
        await asyncio.sleep(0.05)  # a Redis read: the crowd arrives meanwhile
        return len(made)

    async def go() -> list[int]:
        crowd = await asyncio.gather(*(shared.get("test", make) for _ in range(20)))
        assert {m.value for m in crowd} == {1} and len({id(m.body) for m in crowd}) == 1
        second = await shared.get("test", make)  # another tab, same round
        await asyncio.sleep(FRESH_SECONDS + 0.05)
        # the next round: the last figure at once, the new one made meanwhile
        stale = await shared.get("test", make)
        await asyncio.sleep(0.1)
        third = await shared.get("test", make)
        shared.forget()  # a change made through the manager: made again, waited for
        fourth = await shared.get("test", make)
        return [crowd[0].value, second.value, stale.value, third.value, fourth.value]

    assert asyncio.run(go()) == [1, 1, 1, 2, 3]
    assert shared.makings == 3


def test_a_failed_making_fails_its_waiters_and_the_next_ask_tries_again() -> None:
    shared = Shared()
    calls: list[int] = []

    async def make() -> str:
        calls.append(1)
        await asyncio.sleep(0.02)
        if len(calls) == 1:
            raise ConnectionError("Redis went away")
        return "back"

    async def go() -> str:
        failed = await asyncio.gather(
            *(shared.get("k", make) for _ in range(5)), return_exceptions=True
        )
        assert all(isinstance(f, ConnectionError) for f in failed)
        return str((await shared.get("k", make)).value)

    assert asyncio.run(go()) == "back" and len(calls) == 2
