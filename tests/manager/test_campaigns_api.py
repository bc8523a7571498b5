"""``/api/v1/campaigns``: create, list, status, pause, resume, stop, extend; viewers
read, operators steer; bad input is one line. (That a pause reaches the job's nodes is
tested end to end in tests/campaigns/test_campaign_crawl.py.)"""

from __future__ import annotations

from tests.support.manager import Manager

BODY = {
    "name": "c-api",
    "job": "camp-job",
    "url": "http://127.0.0.1:9/a/{date}/{category}",
    "from": "2026-01-01",
    "to": "2026-01-10",
    "categories": ["x", "y"],
}


def test_campaigns_through_the_api(manager: Manager) -> None:
    op = manager.as_("operator")
    assert (
        manager.client.post(
            "/api/v1/campaigns", json=BODY, headers=manager.as_("viewer")
        ).status_code
        == 403
    )
    made = manager.client.post("/api/v1/campaigns", json=BODY, headers=op)
    assert made.status_code == 201, made.text
    assert (made.json()["total"], made.json()["state"]) == (20, "running")
    again = manager.client.post("/api/v1/campaigns", json=BODY, headers=op)
    assert again.status_code == 400 and "exists already" in again.text
    bad = manager.client.post(
        "/api/v1/campaigns", json={**BODY, "name": "c2", "url": "http://x/{keyword}"}, headers=op
    )
    assert bad.status_code == 400 and "which the campaign has not" in bad.text
    assert [c["name"] for c in manager.get("/api/v1/campaigns")["campaigns"]] == ["c-api"]

    paused = manager.client.post("/api/v1/campaigns/c-api/pause", headers=op)
    assert paused.status_code == 200 and paused.json()["state"] == "paused"
    refused = manager.client.post("/api/v1/campaigns/c-api/resume", headers=manager.as_("viewer"))
    assert refused.status_code == 403
    assert (
        manager.client.post("/api/v1/campaigns/c-api/resume", headers=op).json()["state"]
        == "running"
    )
    extended = manager.client.post(
        "/api/v1/campaigns/c-api/extend", json={"to": "2026-01-15"}, headers=op
    )
    assert extended.status_code == 200 and extended.json()["total"] == 30
    stopped = manager.client.post("/api/v1/campaigns/c-api/stop", headers=op)
    assert stopped.json()["state"] == "stopping"
    status = manager.get("/api/v1/campaigns/c-api")
    assert status["units"]["done"] == 0 and status["failed"] == []
    unknown = manager.client.get("/api/v1/campaigns/nope", headers=op)
    assert unknown.status_code == 404 and "unknown campaign 'nope'" in unknown.text
    events = [e["action"] for e in manager.get("/api/v1/events")["events"]]
    assert {"campaign.create", "campaign.pause", "campaign.extend", "campaign.stop"} <= set(events)
