"""Alerts: a rule on a real job fires after its duration, is delivered to a webhook
receiver on loopback signed with the rule's secret (a failed attempt retried and
recorded), and resolves; the webhook URL and secret are never served back."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from crawlfleet.manager import alerts as alert_module
from tests.support.manager import Manager


class Receiver:
    """A webhook receiver on loopback: records each request; the first *fail* answer 500."""

    def __init__(self, fail: int = 0) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.fail = fail
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.requests.append((dict(self.headers), body))
                failing = receiver.fail > 0
                receiver.fail -= 1
                self.send_response(500 if failing else 204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/T0KEN-in-path"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body in self.requests]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(fail=1)
    yield r
    r.server.shutdown()


def test_an_alert_fires_is_delivered_signed_with_a_retry_and_resolves(
    manager: Manager, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(alert_module, "DELIVERY_PAUSES", (0.1,))
    admin = manager.as_("admin")
    manager.beat("news", "n1")
    rule = {
        "name": "no-nodes",
        "job": "news",
        "metric": "nodes_alive",
        "op": "<",
        "threshold": 1,
        "for_seconds": 0.5,
        "webhook": receiver.url,
    }
    made = manager.client.post("/api/v1/alerts/rules", json=rule, headers=admin)
    assert made.status_code == 200, made.text
    secret = made.json()["secret"]
    listed = manager.client.get("/api/v1/alerts/rules", headers=admin)
    assert "T0KEN" not in listed.text and secret not in listed.text
    assert (
        listed.json()["rules"][0]["webhook"]
        == f"http://127.0.0.1:{receiver.server.server_port}/..."
    )

    manager.beat("news", "n1", state="leaving")  # no node left: the condition holds
    manager.wait_for("delivered", lambda: len(receiver.requests) >= 2, timeout=15)
    headers, body = receiver.requests[-1]
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    assert headers["X-Crawlfleet-Signature"] == expected
    first = receiver.bodies()[-1]
    assert (first["status"], first["job"], first["metric"], first["value"]) == (
        "firing",
        "news",
        "nodes_alive",
        0,
    )
    manager.beat("news", "n2")  # a node again: resolved
    manager.wait_for("resolved", lambda: len(receiver.requests) >= 3, timeout=15)
    assert [b["status"] for b in receiver.bodies()] == ["firing", "firing", "resolved"]
    (alert,) = manager.get("/api/v1/alerts")["alerts"]
    assert alert["status"] == "resolved" and alert["rule"] == "no-nodes"
    attempts = [(d["event"], d["attempt"], d["ok"], d["http_status"]) for d in alert["deliveries"]]
    assert attempts == [
        ("firing", 1, False, 500),
        ("firing", 2, True, 204),
        ("resolved", 1, True, 204),
    ]
    assert "T0KEN" not in json.dumps(manager.get("/api/v1/events"))


def test_a_condition_shorter_than_its_duration_fires_nothing(
    manager: Manager, receiver: Receiver
) -> None:
    admin = manager.as_("admin")
    op = manager.as_("operator")
    manager.client.post("/api/v1/jobs/quiet/seeds", json={"seeds": ["http://a.test/"]}, headers=op)
    rule = {
        "name": "stall",
        "metric": "queue_stalled_seconds",
        "op": ">",
        "threshold": 0,
        "for_seconds": 3600,
        "webhook": receiver.url,
    }
    assert manager.client.post("/api/v1/alerts/rules", json=rule, headers=admin).status_code == 200
    manager.wait_for("pending", lambda: len(manager.get("/api/v1/alerts")["alerts"]) == 1)
    assert manager.get("/api/v1/alerts")["alerts"][0]["status"] == "pending"
    assert receiver.requests == []


def test_bad_rules_name_what_is_wrong(manager: Manager) -> None:
    admin = manager.as_("admin")
    base = {"name": "r", "metric": "queued", "op": ">", "threshold": 1, "webhook": "http://x.test/"}
    for change, words in [
        ({"metric": "queue"}, "unknown metric 'queue'"),
        ({"webhook": "ftp://x.test/"}, "webhook must be an http(s):// URL"),
        ({"name": "a b"}, "alert name 'a b' is not valid"),
    ]:
        r = manager.client.post("/api/v1/alerts/rules", json={**base, **change}, headers=admin)
        assert r.status_code == 400 and words in r.json()["error"]["message"], r.text
    r = manager.client.post("/api/v1/alerts/rules", json=base, headers=manager.as_("operator"))
    assert r.status_code == 403
    metrics = manager.get("/api/v1/alerts/metrics")["metrics"]
    assert {"job_finished", "job_failed", "nodes_dead", "errors_per_page"} <= set(metrics)
