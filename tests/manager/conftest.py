"""The manager in-process (FastAPI's TestClient runs its lifespan) against the real
Redis of the tests and a SQLite state DB, with a token of each role."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from scrapy.settings import Settings

from crawlfleet.frontier.client import Frontier
from crawlfleet.manager.app import create_app
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.settings.config import apply_defaults
from crawlfleet.state.db import StateDB
from crawlfleet.state.sealing import new_key
from crawlfleet.state.tokens import create_token
from tests.state.conftest import fresh_database_url


@dataclass
class Manager:
    app: FastAPI
    client: TestClient
    db: StateDB
    redis_url: str
    prefix: str
    tokens: dict[str, str]  #: role -> token

    def get(self, path: str) -> Any:
        """GET *path* with the viewer's token: its JSON."""
        r = self.client.get(path, headers=self.as_("viewer"))
        r.raise_for_status()
        return r.json()

    def wait_for(self, what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, f"timed out waiting: {what}"
            time.sleep(0.05)

    def as_(self, role: str) -> dict[str, str]:
        """Headers of a request made with *role*'s token."""
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    def beat(
        self,
        job: str,
        node: str,
        state: str = "running",
        ttl_ms: int = 30_000,
        **published: object,
    ) -> None:
        """Heartbeat *node* into *job* as a live node does (status published; "leaving":
        the node leaves the registry, as a node that closes)."""

        async def go() -> None:
            client = make_client(self.redis_url)
            try:
                frontier = Frontier(client, JobKeys.of(self.prefix, job))
                await frontier.register_job()
                status = (
                    "leaving"
                    if state == "leaving"
                    else json.dumps({"state": state, "pages_per_min": 60, **published})
                )
                await frontier.heartbeat(node, ttl_ms=ttl_ms, status=status, busy=True, lease_ms=1)
            finally:
                await client.aclose()

        asyncio.run(go())


#: The tests' managers seal the state DB's secrets with this key (never a key file in
#: the working directory).
SECRET_KEY = new_key()


def manager_settings(prefix: str, **extra: object) -> Settings:
    settings = Settings()
    apply_defaults(settings)
    settings.set("CRAWLFLEET_KEY_PREFIX", prefix, priority="cmdline")
    settings.set("CRAWLFLEET_SECRET_KEY", SECRET_KEY, priority="cmdline")
    for name, value in extra.items():
        settings.set(name, value, priority="cmdline")
    return settings


@pytest.fixture(params=["sqlite", "postgresql"])
def manager(
    request: pytest.FixtureRequest, redis_server_url: str, key_prefix: str, tmp_path: Path
) -> Iterator[Manager]:
    """The manager on a SQLite state DB, and on a fresh PostgreSQL database where one
    answers (skipped with the reason otherwise)."""
    urls = fresh_database_url(request.param, tmp_path)
    db = StateDB.open(next(urls))
    db.upgrade()
    tokens = {role: create_token(db, f"{role}-1", role) for role in ("viewer", "operator", "admin")}
    settings = manager_settings(key_prefix, CRAWLFLEET_MANAGER_WATCH_SECONDS=0.2)
    app = create_app(settings, redis_server_url, db)
    try:
        with TestClient(app, base_url="http://127.0.0.1") as client:
            yield Manager(app, client, db, redis_server_url, key_prefix, tokens)
    finally:
        db.close()
        urls.close()  # drops the PostgreSQL database
