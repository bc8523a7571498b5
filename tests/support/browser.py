"""A headless chromium driven by Playwright for the dashboard's tests, watching every
request the pages make: one to anywhere but the manager under test is aborted and
listed, so that a test can fail when an asset, font or beacon would leave 127.0.0.1.
And the steps every dashboard test takes: sign in, take a screenshot.

Chromium itself is Debian's (:mod:`tests.support.chromium`); the fixture ``browser``
(tests/dashboard/conftest.py) launches it, or skips saying why.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.live_manager import LiveManager

__all__ = ["SCREENSHOTS_ENV", "Browser", "screenshot", "sign_in"]

#: Where the screenshots of docs/ are written when set (``docs/images`` to refresh them).
SCREENSHOTS_ENV = "CRAWLFLEET_SCREENSHOTS"


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


def sign_in(page: Any, manager: LiveManager, role: str) -> None:
    """Open the dashboard and sign in with *role*'s token through the form."""
    page.goto(manager.url + "/")
    page.fill("#token", manager.tokens[role])
    page.click("#login button[type=submit]")
    page.wait_for_selector("#nav:not([hidden])")


def screenshot(page: Any, name: str, tmp_path: Path) -> None:
    """*page* as a PNG in the test's folder, and in ``$CRAWLFLEET_SCREENSHOTS`` if set."""
    page.screenshot(path=str(tmp_path / name), full_page=False)
    target = os.environ.get(SCREENSHOTS_ENV)
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp_path / name, Path(target) / name)
