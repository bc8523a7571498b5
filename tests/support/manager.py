"""The manager for tests: its settings, the manager app in-process (FastAPI's TestClient
runs its lifespan) with a token of each role, the API's error shape, and
``crawlfleet manager ...`` run as an operator runs it.

The fixture ``manager`` (tests/manager/conftest.py) opens one :class:`Manager` a test;
:mod:`tests.support.live_manager` serves the app with a real uvicorn instead.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient
from scrapy.settings import Settings

from crawlfleet.frontier.client import Frontier
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.settings.config import apply_defaults
from crawlfleet.state.db import StateDB
from crawlfleet.state.sealing import new_key
from tests.support.paths import ROOT

__all__ = [
    "ROLES",
    "SECRET_KEY",
    "Manager",
    "assert_error",
    "manager_command",
    "manager_settings",
]

#: The roles a test manager has a token of (named ``<role>-1``).
ROLES = ("viewer", "operator", "admin")
#: The tests' managers seal the state DB's secrets with this key (never a key file in
#: the working directory).
SECRET_KEY = new_key()


def manager_settings(prefix: str, **extra: object) -> Settings:
    """The manager's settings: the defaults, key prefix *prefix*, :data:`SECRET_KEY`, and
    *extra* (setting name -> value), all at the command line's priority."""
    settings = Settings()
    apply_defaults(settings)
    settings.set("CRAWLFLEET_KEY_PREFIX", prefix, priority="cmdline")
    settings.set("CRAWLFLEET_SECRET_KEY", SECRET_KEY, priority="cmdline")
    for name, value in extra.items():
        settings.set(name, value, priority="cmdline")
    return settings


@dataclass
class Manager:
    """The manager app in-process: its test client, state DB, Redis and key prefix, and
    a token of each role."""

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


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    """Assert that *response* is the API's one error shape with *status* and *code*;
    returns the error."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["message"], error
    return error  # type: ignore[no-any-return]


def manager_command(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    """``crawlfleet manager ARGS --db DB`` as a process from the repository's root."""
    return subprocess.run(
        [sys.executable, "-m", "crawlfleet.cli.main", "manager", *args, "--db", db],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
