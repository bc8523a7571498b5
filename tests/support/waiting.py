"""Waiting in a test for what another thread or process does: poll a condition until it
holds or a deadline passes. ``wait_until`` fails the test naming what it waited for;
``poll`` answers whether the condition came true, for a test that asserts it itself."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["poll", "wait_until"]


def wait_until(
    what: str, check: Callable[[], bool], timeout: float = 20.0, step: float = 0.1
) -> None:
    """Call *check* every *step* seconds until it is true; fail with "timed out waiting:
    *what*" once *timeout* seconds have passed."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(step)


def poll(condition: Callable[[], bool], timeout: float = 10.0, step: float = 0.02) -> bool:
    """Call *condition* every *step* seconds until it is true (True) or *timeout* seconds
    have passed (False: its last answer)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()
