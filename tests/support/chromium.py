"""Debian's chromium for the tests that drive a browser (``/usr/bin/chromium``, or
``CRAWLFLEET_CHROMIUM``): never a downloaded one. ``./dev.sh test`` installs it where
it may use apt-get; elsewhere those tests are skipped, saying why."""

from __future__ import annotations

import os
import shutil

__all__ = ["CHROMIUM_ARGS", "MISSING", "chromium_path"]

#: Chromium's flags for a machine with no network beyond loopback: nothing of its own
#: (updates, sync, safe browsing) tries to reach out.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--metrics-recording-only",
]
#: Why a browser test is skipped without chromium.
MISSING = (
    "Debian's chromium is not installed (apt-get install chromium, or set CRAWLFLEET_CHROMIUM)"
)


def chromium_path() -> str | None:
    path = os.environ.get("CRAWLFLEET_CHROMIUM") or "/usr/bin/chromium"
    return path if os.access(path, os.X_OK) else shutil.which("chromium")
