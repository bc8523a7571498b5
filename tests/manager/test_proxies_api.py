"""``/api/v1/proxies``: the fleet's proxy pool as a viewer sees it, passwords hidden."""

from __future__ import annotations

import asyncio

from crawlfleet.fleet.proxies import ProxyPool
from crawlfleet.redis.connection import make_client
from crawlfleet.state.sealing import Sealer
from tests.support.manager import SECRET_KEY, Manager


def test_the_pool_through_the_api(manager: Manager) -> None:
    async def fill() -> None:
        client = make_client(manager.redis_url)
        try:
            await ProxyPool(client, manager.prefix, Sealer([SECRET_KEY], "the manager's")).add(
                ["http://u:s3cr3t@127.0.0.1:3128", "http://127.0.0.2:3128"]
            )
        finally:
            await client.aclose()

    asyncio.run(fill())
    r = manager.client.get("/api/v1/proxies", headers=manager.as_("viewer"))
    assert r.status_code == 200 and "s3cr3t" not in r.text
    shown = {p["proxy"]: p["state"] for p in r.json()["proxies"]}
    assert shown == {"http://***@127.0.0.1:3128": "live", "http://127.0.0.2:3128": "live"}
    assert manager.client.get("/api/v1/proxies").status_code == 401


def test_an_admin_adds_and_removes_proxies_and_others_cannot(manager: Manager) -> None:
    body = {"proxies": ["http://u:pa55word@127.0.0.3:3128", "http://127.0.0.4:8080"]}
    for role in ("viewer", "operator"):
        r = manager.client.post("/api/v1/proxies", json=body, headers=manager.as_(role))
        assert r.status_code == 403, (role, r.text)
    r = manager.client.post("/api/v1/proxies", json=body, headers=manager.as_("admin"))
    assert r.status_code == 200, r.text
    assert r.json() == {"added": 2, "size": 2} and "pa55word" not in r.text
    listed = manager.client.get("/api/v1/proxies", headers=manager.as_("viewer")).json()
    ids = {p["proxy"]: p["id"] for p in listed["proxies"]}
    assert set(ids) == {"http://***@127.0.0.3:3128", "http://127.0.0.4:8080"}

    # a URL that is no proxy is refused whole, its password not echoed; nothing added
    bad = {"proxies": ["http://127.0.0.5:3128", "ftp://u:hunter22@127.0.0.6"]}
    r = manager.client.post("/api/v1/proxies", json=bad, headers=manager.as_("admin"))
    assert r.status_code == 400 and "hunter22" not in r.text, r.text
    assert "ftp://***@127.0.0.6" in r.json()["error"]["message"]
    listed = manager.client.get("/api/v1/proxies", headers=manager.as_("viewer")).json()
    assert len(listed["proxies"]) == 2

    gone = ids["http://127.0.0.4:8080"]
    r = manager.client.delete(f"/api/v1/proxies/{gone}", headers=manager.as_("operator"))
    assert r.status_code == 403
    r = manager.client.delete(f"/api/v1/proxies/{gone}", headers=manager.as_("admin"))
    assert r.status_code == 200 and r.json() == {"removed": gone}
    states = {
        p["id"]: p["state"]
        for p in manager.client.get("/api/v1/proxies", headers=manager.as_("viewer")).json()[
            "proxies"
        ]
    }
    assert states[gone] == "removed"
    # a removed proxy added again stays out; an unknown id is a 404, a malformed one a 400
    r = manager.client.post(
        "/api/v1/proxies", json={"proxies": ["http://127.0.0.4:8080"]}, headers=manager.as_("admin")
    )
    assert r.json() == {"added": 0, "size": 1}
    r = manager.client.delete("/api/v1/proxies/0123456789ab", headers=manager.as_("admin"))
    assert r.status_code == 404 and "no proxy 0123456789ab" in r.text
    r = manager.client.delete("/api/v1/proxies/nope", headers=manager.as_("admin"))
    assert r.status_code == 400
    events = manager.client.get("/api/v1/events", headers=manager.as_("viewer")).text
    assert "proxies.add" in events and "proxies.remove" in events and "pa55word" not in events
