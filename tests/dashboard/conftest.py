"""The dashboard in a real browser: Debian's chromium (``/usr/bin/chromium``, or
``CRAWLFLEET_CHROMIUM``) driven headless by Playwright, against the manager served by a
real uvicorn on loopback. Nothing downloads a browser: without chromium or Playwright
these tests are skipped, saying why (``./dev.sh test`` installs Debian's chromium where
it may use apt-get).

Every request the browser makes is checked: one to anywhere but the manager is aborted
and fails the test (no asset, font or beacon leaves 127.0.0.1).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.browser import Browser
from tests.support.chromium import CHROMIUM_ARGS, chromium_path
from tests.support.live_manager import LiveManager, running_manager


@pytest.fixture(scope="module")
def live_manager(
    redis_server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveManager]:
    """The manager of :func:`running_manager` on the tests' Redis, for a module."""
    with running_manager(redis_server_url, tmp_path_factory.mktemp("manager")) as manager:
        yield manager


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
