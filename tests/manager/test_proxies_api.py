"""``/api/v1/proxies``: the fleet's proxy pool as a viewer sees it, passwords hidden."""

from __future__ import annotations

import asyncio

from crawlfleet.fleet.proxies import ProxyPool
from crawlfleet.redis.connection import make_client
from tests.manager.conftest import Manager


def test_the_pool_through_the_api(manager: Manager) -> None:
    async def fill() -> None:
        client = make_client(manager.redis_url)
        try:
            await ProxyPool(client, manager.prefix).add(
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
