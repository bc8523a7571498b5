"""The manager served by a real uvicorn on 127.0.0.1 in a thread of the test process,
for tests that need a real HTTP server (a browser, a Scrapyd talking back): a SQLite
state DB, a key prefix of its own (its keys deleted after), a token of each role.

Playwright's sync API keeps an event loop running in the test's thread, so what needs
asyncio here runs in a thread of its own (:func:`in_thread`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from crawlfleet.frontier.client import Frontier
from crawlfleet.manager.app import create_app
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.state.db import StateDB
from crawlfleet.state.tokens import create_token
from tests.support.manager import ROLES, manager_settings

__all__ = ["LiveManager", "in_thread", "running_manager"]


@dataclass
class LiveManager:
    """A served manager: its base URL, Redis, key prefix, state DB and tokens by role."""

    url: str
    redis_url: str
    prefix: str
    db: StateDB
    tokens: dict[str, str] = field(default_factory=dict)

    def beat(self, job: str, node: str, status: dict[str, Any]) -> None:
        """Heartbeat *node* into *job* with *status*, as a live node does."""

        async def go() -> None:
            client = make_client(self.redis_url)
            try:
                frontier = Frontier(client, JobKeys.of(self.prefix, job))
                await frontier.register_job()
                await frontier.heartbeat(
                    node, ttl_ms=60_000, status=json.dumps(status), busy=True, lease_ms=1
                )
            finally:
                await client.aclose()

        in_thread(go)


def in_thread(fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run the coroutine *fn* makes to its end in a thread of its own (Playwright's sync
    API keeps an event loop running in the test's thread)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(fn())
        except BaseException as exc:  # raised again in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    if errors:
        raise errors[0]


@contextlib.contextmanager
def running_manager(redis_url: str, folder: Path, **settings: object) -> Iterator[LiveManager]:
    """``crawlfleet manager`` under a real uvicorn on 127.0.0.1, a SQLite state DB in
    *folder*, a key prefix of its own (its keys deleted after), a token of each role
    (viewer, operator, admin); *settings* are more of the manager's settings."""
    prefix = f"cftdash{os.getpid()}{folder.name[-6:]}"
    db = StateDB.open(f"sqlite:///{folder / 'state.sqlite3'}")
    db.upgrade()
    tokens = {role: create_token(db, f"{role}-1", role) for role in ROLES}
    settings = {"CRAWLFLEET_MANAGER_WATCH_SECONDS": 0.5, **settings}
    app = create_app(manager_settings(prefix, **settings), redis_url, db)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the manager did not start"
        time.sleep(0.05)
    try:
        yield LiveManager(f"http://127.0.0.1:{port}", redis_url, prefix, db, tokens)
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()

        async def clean() -> None:
            client = make_client(redis_url, socket_connect_timeout=2)
            try:
                keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
                if keys:
                    await client.delete(*keys)
            finally:
                await client.aclose()

        with contextlib.suppress(Exception):  # a test may have stopped its Redis
            in_thread(clean)
