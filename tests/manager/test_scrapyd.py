"""The manager with two real Scrapyd servers (the PyPI package) on loopback, as an
operator uses it: `crawlfleet manager serve`, Scrapyd nodes registered (one behind basic
auth), a Scrapy project deployed with `crawlfleet deploy`, a job run on both by
"least-loaded", the crawl complete on the shared frontier, logs read, a process
cancelled, and a process whose Scrapyd restarted marked lost."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from crawlfleet.redis.embedded import free_port
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import TestSite
from tests.support.cli import cli
from tests.support.scrapyd_servers import PASSWORD, Scrapyd, make_project
from tests.support.waiting import wait_until


@pytest.fixture
def scrapyds(tmp_path: Path) -> Iterator[tuple[Scrapyd, Scrapyd]]:
    a = Scrapyd(tmp_path / "scrapyd-a", free_port(), auth=False)
    b = Scrapyd(tmp_path / "scrapyd-b", free_port(), auth=True)
    try:
        a.start()
        b.start()
        yield a, b
    finally:
        a.kill()
        b.kill()


@pytest.mark.slow
def test_deploy_run_cancel_and_lost_with_real_scrapyd(
    scrapyds: tuple[Scrapyd, Scrapyd], redis_server_url: str, key_prefix: str, tmp_path: Path
) -> None:
    a, b = scrapyds
    db = f"sqlite:///{tmp_path / 'state.sqlite3'}"
    admin = cli("manager", "token", "create", "root", "--role", "admin", "--db", db, cwd=tmp_path)
    token = admin.stdout.split()[-1]
    port = free_port()
    argv = [sys.executable, "-m", "crawlfleet.cli.main", "manager", "serve", "--port", str(port)]
    argv += [
        "--db",
        db,
        "--redis-url",
        redis_server_url,
        "-s",
        f"CRAWLFLEET_KEY_PREFIX={key_prefix}",
    ]
    argv += ["-s", "CRAWLFLEET_MANAGER_WATCH_SECONDS=0.5"]
    log = tmp_path / "manager.log"
    with log.open("w") as out:
        manager = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"
    api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60)

    def up() -> bool:
        try:
            return httpx.get(f"{base}/healthz").status_code == 200
        except httpx.TransportError:
            return False

    def ok(r: httpx.Response) -> Any:
        assert r.status_code == 200, r.text
        return r.json()

    try:
        wait_until("manager", up, timeout=30)
        # register both; a wrong password is refused and nothing is registered
        ok(api.post("/api/v1/scrapyd", json={"name": "a", "url": a.url}))
        bad = api.post(
            "/api/v1/scrapyd",
            json={"name": "b", "url": b.url, "username": "cf", "password": "wrong"},
        )
        assert bad.status_code == 400 and "refused the credentials" in bad.text
        ok(
            api.post(
                "/api/v1/scrapyd",
                json={"name": "b", "url": f"http://cf:{PASSWORD}@127.0.0.1:{b.port}"},
            )
        )
        listed = api.get("/api/v1/scrapyd")
        assert PASSWORD not in listed.text
        nodes = ok(listed)["scrapyd"]
        assert [(n["name"], n["reachable"], n["auth"]) for n in nodes] == [
            ("a", True, False),
            ("b", True, True),
        ]

        # deploy the project with the CLI, through the manager
        project = make_project(tmp_path / "project")
        deployed = cli(
            "deploy", "--manager", base, cwd=project, timeout=300, CRAWLFLEET_MANAGER_TOKEN=token
        )
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        assert "a: deployed (1 spider)" in deployed.stdout
        assert "b: deployed (1 spider)" in deployed.stdout
        assert not (project / "build").exists() and not list(project.glob("*.egg-info"))

        # run the job on two nodes chosen by load: one on each Scrapyd
        with TestSite(SiteModel(pages=120, hosts=2, problems=False), latency_seconds=0.05) as site:
            body = {
                "spider": "site",
                "project": "fleetproj",
                "nodes": "least-loaded",
                "count": 2,
                "args": {"start_urls": ",".join(site.seed_urls)},
            }
            started = ok(api.post("/api/v1/jobs/shared/run", json=body))["started"]
            assert sorted(s["scrapyd"] for s in started) == ["a", "b"]

            def processes(job: str) -> list[dict[str, Any]]:
                return ok(api.get(f"/api/v1/jobs/{job}/processes"))["processes"]  # type: ignore[no-any-return]

            wait_until(
                "both processes finished",
                lambda: [p["state"] for p in processes("shared")] == ["finished", "finished"],
                timeout=180,
            )
            stats = site.stats()
            assert stats["never_fetched"] == [] and stats["fetched_twice"] == []
        job = ok(api.get("/api/v1/jobs/shared"))
        assert job["state"] == "finished" and job["runs_total"]["nodes"] == 2
        wait_until(
            "run closed",
            lambda: ok(api.get("/api/v1/jobs/shared/runs"))["runs"][0]["state"] == "finished",
            timeout=60,
        )
        (run,) = ok(api.get("/api/v1/jobs/shared/runs"))["runs"]
        assert run["started_by"] == "root" and run["figures"]["pages"] >= 120
        for p in processes("shared"):
            got = ok(api.get(f"/api/v1/jobs/shared/processes/{p['id']}/log"))
            assert got["levels"]["INFO"] > 0 and "crawlfleet" in got["text"]

        # nodes busy on a site that answers in 60 s: one cancelled, one lost
        with TestSite(SiteModel(pages=20, hosts=1, problems=False), latency_seconds=60) as slow:

            def start_busy(job: str) -> dict[str, Any]:
                body = {
                    "spider": "site",
                    "project": "fleetproj",
                    "nodes": ["a"],
                    "args": {"start_urls": slow.seed_urls[0]},
                }
                (started,) = ok(api.post(f"/api/v1/jobs/{job}/run", json=body))["started"]
                wait_until(
                    f"{job} fetching",
                    lambda: (
                        slow.stats()["total_requests"] >= 1
                        and processes(job)[0]["state"] == "running"
                    ),
                    timeout=60,
                )
                return started  # type: ignore[no-any-return]

            # TERM, then KILL after the grace, then checked with Scrapyd
            busy = start_busy("busy")
            cancelled = ok(
                api.post(
                    f"/api/v1/jobs/busy/processes/{busy['id']}/cancel", json={"grace_seconds": 3}
                )
            )
            assert cancelled["state"] == "cancelled", cancelled
            note = cancelled["note"]
            assert note == "stopped on TERM" or (
                note.startswith("killed: still running 3 s after TERM") and "grace_seconds" in note
            ), cancelled

            # a Scrapyd that goes down with its process, and comes back knowing nothing
            start_busy("doomed")
            a.kill()
            a.start()
            wait_until("lost", lambda: processes("doomed")[0]["state"] == "lost", timeout=30)
        events = [
            e["action"] for e in ok(api.get("/api/v1/events", params={"limit": 50}))["events"]
        ]
        assert {"scrapyd.add", "deploy", "job.run", "process.cancel"} <= set(events)
    finally:
        manager.send_signal(signal.SIGINT)
        manager.wait(20)
        api.close()
    text = log.read_text()
    assert PASSWORD not in text and token not in text and "Traceback" not in text, text
