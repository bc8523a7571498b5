"""``/api/v1/jobs/{job}/errors``: the registry through the API, and a re-crawl that puts
the stored requests back into the job's frontier, past its seen-filter."""

from __future__ import annotations

from scrapy import Request

from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.state.errors import Failure, record_failures
from crawlfleet.state.models import utcnow
from tests.manager.conftest import Manager


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
    assert r.json() == {"job": "e-job", "queued": 1, "queued_by_url": 1}  # payload unreadable
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
