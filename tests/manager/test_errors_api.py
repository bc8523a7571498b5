"""``/api/v1/jobs/{job}/errors``: the registry through the API, and a re-crawl that puts
the stored requests back into the job's frontier, past its seen-filter."""

from __future__ import annotations

from pathlib import Path

from scrapy import Request
from scrapy.settings import Settings

from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.manager.launch import process_settings
from crawlfleet.manager.routes.models import RunBody
from crawlfleet.state.errors import Failure, record_failures
from crawlfleet.state.models import utcnow
from crawlfleet.state.scrapyd import ScrapydInfo
from crawlfleet.state.url import state_db_identity, state_db_url
from tests.support.manager import Manager


def test_errors_are_listed_counted_and_recrawled(manager: Manager) -> None:
    payload = RequestCodec(None).encode(Request("http://127.0.0.1:9/a", meta={"k": 1}))
    record_failures(
        manager.db,
        [
            Failure(
                "e-job",
                "aa" * 20,
                "http://127.0.0.1:9/a",
                "127.0.0.1",
                "http",
                "HTTP 503",
                "n1",
                utcnow(),
                http_status=503,
                payload=payload,
            ),
            Failure(
                "e-job",
                "bb" * 20,
                "http://127.0.0.1:9/b",
                "127.0.0.1",
                "exception",
                "TimeoutError: took too long",
                "n1",
                utcnow(),
                payload=b"not a payload",
            ),
            Failure(
                "e-job",
                "cc" * 20,
                "http://127.0.0.1:9/c",
                "127.0.0.1",
                "parse",
                "ValueError: x",
                "n1",
                utcnow(),
                stack="Traceback ...",
            ),
        ],
    )
    listed = manager.get("/api/v1/jobs/e-job/errors")["errors"]
    assert [e["url"][-1] for e in listed] == ["c", "b", "a"] and "stack" not in listed[0]
    assert manager.get("/api/v1/jobs/e-job/errors?reason=http")["errors"][0]["http_status"] == 503
    stats = manager.get("/api/v1/jobs/e-job/errors/stats")
    assert stats["by_state"]["open"] == 3 and stats["open_by_reason"]["parse"] == 1

    refused = manager.client.post(
        "/api/v1/jobs/e-job/errors/recrawl", json={}, headers=manager.as_("viewer")
    )
    assert refused.status_code == 403
    r = manager.client.post(
        "/api/v1/jobs/e-job/errors/recrawl",
        json={"reason": "exception"},
        headers=manager.as_("operator"),
    )
    assert r.json() == {"job": "e-job", "queued": 1, "queued_by_url": 1, "invalid_url": 0}
    r = manager.client.post(
        "/api/v1/jobs/e-job/errors/recrawl", json={}, headers=manager.as_("operator")
    )
    assert r.json()["queued"] == 2 and r.json()["queued_by_url"] == 1  # c had no payload
    assert manager.get("/api/v1/jobs/e-job")["queued"] == 3
    assert manager.get("/api/v1/jobs/e-job/errors/stats")["by_state"]["queued"] == 3
    again = manager.client.post(
        "/api/v1/jobs/e-job/errors/recrawl", json={}, headers=manager.as_("operator")
    )
    assert again.json()["queued"] == 0  # nothing open is left to queue
    events = manager.get("/api/v1/jobs/e-job/events")["events"]
    assert [e["action"] for e in events].count("job.errors.recrawl") == 3
    bad = manager.client.get("/api/v1/jobs/e-job/errors?reason=nope", headers=manager.as_("viewer"))
    assert bad.status_code == 400


def test_nodes_that_write_their_failures_elsewhere_are_named(manager: Manager) -> None:
    """A node started where the manager's state DB is not its own (a SQLite file
    relative to Scrapyd's folder, say) counts its failures elsewhere: the job's error
    figures name it, and where it writes."""
    mine = state_db_identity(manager.db.engine.url.render_as_string(hide_password=False))
    there = "sqlite:////var/lib/scrapyd/.crawlfleet/state.sqlite3 on scrapyd-2"
    manager.beat("where", "node-here", state_db=mine)
    manager.beat("where", "node-there", state_db=there)
    manager.beat("where", "node-silent")  # its registry is off: it says nothing
    stats = manager.get("/api/v1/jobs/where/errors/stats")
    assert stats["state_db"] == mine and stats["nodes_elsewhere"] == {"node-there": there}


def test_processes_started_through_scrapyd_get_the_managers_state_db(manager: Manager) -> None:
    ctx = manager.app.state.ctx
    url = manager.db.engine.url
    local = ScrapydInfo("a", "http://127.0.0.1:6800", None, None)
    remote = ScrapydInfo("b", "http://scrapyd-2.internal:6800", None, None)
    body = RunBody(spider="s", project="p")
    given = process_settings(ctx, "j", body, local).get("CRAWLFLEET_MANAGER_STATE_DB_URL")
    elsewhere = process_settings(ctx, "j", body, remote).get("CRAWLFLEET_MANAGER_STATE_DB_URL")
    if url.get_backend_name() == "sqlite":
        # a file is shared with a Scrapyd on this machine only, by its absolute path
        assert given == f"sqlite:///{Path(str(url.database)).absolute()}" and elsewhere is None
    else:
        assert given == elsewhere == url.render_as_string(hide_password=False)
    own = RunBody(spider="s", project="p", settings={"CRAWLFLEET_STATE_DB_URL": "sqlite:///x"})
    assert "CRAWLFLEET_MANAGER_STATE_DB_URL" not in process_settings(ctx, "j", own, local)
    # a node reads the manager's state DB unless its own settings name one
    settings = Settings(
        {"CRAWLFLEET_DATA_DIR": "/d", "CRAWLFLEET_MANAGER_STATE_DB_URL": "m://h/db"}
    )
    assert state_db_url(settings) == "m://h/db"
    settings.set("CRAWLFLEET_STATE_DB_URL", "own://h/db", priority="project")
    assert state_db_url(settings) == "own://h/db"
