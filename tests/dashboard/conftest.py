"""The dashboard in a real browser: Debian's chromium (``/usr/bin/chromium``, or
``CRAWLFLEET_CHROMIUM``) driven headless by Playwright, against the manager served by a
real uvicorn on loopback. Nothing downloads a browser: without chromium or Playwright
these tests are skipped, saying why (``./dev.sh test`` installs Debian's chromium where
it may use apt-get).

Every request the browser makes is checked: one to anywhere but the manager is aborted
and fails the test (no asset, font or beacon leaves 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from crawlfleet.frontier.client import Frontier
from crawlfleet.manager.app import create_app
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.state.db import StateDB
from crawlfleet.state.tokens import create_token
from tests.chromium import CHROMIUM_ARGS, chromium_path
from tests.manager.conftest import manager_settings

ROOT = Path(__file__).resolve().parents[2]
#: Where the screenshots of docs/ are written when set (``docs/images`` to refresh them).
SCREENSHOTS_ENV = "CRAWLFLEET_SCREENSHOTS"


@dataclass
class LiveManager:
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
    tokens = {role: create_token(db, f"{role}-1", role) for role in ("viewer", "operator", "admin")}
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


@pytest.fixture(scope="module")
def live_manager(
    redis_server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveManager]:
    """The manager of :func:`running_manager` on the tests' Redis, for a module."""
    with running_manager(redis_server_url, tmp_path_factory.mktemp("manager")) as manager:
        yield manager


@dataclass
class Browser:
    """A headless chromium and what it asked for; ``outside`` lists every request
    that was not for the manager (aborted)."""

    browser: Any
    base: str
    outside: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def page(self, width: int = 1280, height: int = 860, base: str | None = None) -> Any:
        """A new page in a fresh context (no cookies), every request checked: only the
        module's manager (or the one at *base*) may be asked."""
        context = self.browser.new_context(viewport={"width": width, "height": height})
        allowed = (base or self.base) + "/"

        def route(route: Any) -> None:
            url = route.request.url
            self.requests.append(url)
            if url.startswith(allowed) or url.startswith("data:"):
                route.continue_()
            else:
                self.outside.append(url)
                route.abort()

        context.route("**/*", route)
        page = context.new_page()
        page.set_default_timeout(20_000)
        return page


@pytest.fixture(scope="module")
def browser(live_manager: LiveManager) -> Iterator[Browser]:
    path = chromium_path()
    if path is None:
        pytest.skip(
            "Debian's chromium is not installed (apt-get install chromium, or set "
            "CRAWLFLEET_CHROMIUM): the dashboard's browser tests are skipped"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright is not installed (pip install -e '.[test]'): browser tests skipped")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=path, headless=True, args=CHROMIUM_ARGS)
        try:
            watched = Browser(chromium, live_manager.url)
            yield watched
            assert watched.outside == [], f"requests left 127.0.0.1: {watched.outside[:5]}"
        finally:
            chromium.close()


def sign_in(page: Any, manager: LiveManager, role: str) -> None:
    """Open the dashboard and sign in with *role*'s token through the form."""
    page.goto(manager.url + "/")
    page.fill("#token", manager.tokens[role])
    page.click("#login button[type=submit]")
    page.wait_for_selector("#nav:not([hidden])")


def wait_until(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(0.1)


def screenshot(page: Any, name: str, tmp_path: Path) -> None:
    """*page* as a PNG in the test's folder, and in ``$CRAWLFLEET_SCREENSHOTS`` if set."""
    page.screenshot(path=str(tmp_path / name), full_page=False)
    target = os.environ.get(SCREENSHOTS_ENV)
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp_path / name, Path(target) / name)
