"""Callers looked up lately: a token's or a dashboard session's lookup in the state DB
serves the caller's requests for :data:`CALLER_SECONDS`, so a client asking many times
a second costs the state DB one lookup a second or so, not one per request.

One lookup of a credential at a time: the requests that ask for it while it runs wait
for that one (when the caller's time is up, a client with fifty requests in flight
costs one lookup, not fifty at once on the state DB's threads). Only callers found are
kept (a token made a moment ago works at once). A token revoked
or a session ended elsewhere (``crawlfleet manager token revoke``, another manager) is
refused within :data:`CALLER_SECONDS`; through this manager, at once (every change
through it forgets them all: :meth:`ManagerContext.changed`). Kept by a hash of the
credential, never the credential itself.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from crawlfleet.manager.shared import single_flight

__all__ = ["CALLER_SECONDS", "RecentCallers"]

#: How long one lookup of a caller serves.
CALLER_SECONDS = 2.0
#: Callers kept at most, then start over.
MAX_CALLERS = 10_000

T = TypeVar("T")


class RecentCallers:
    """See the module docstring."""

    def __init__(self, seconds: float = CALLER_SECONDS, max_callers: int = MAX_CALLERS) -> None:
        self.seconds = seconds
        self.max_callers = max_callers
        self._found: dict[str, tuple[float, object]] = {}
        self._finding: dict[str, asyncio.Task[Any]] = {}
        self._forgotten = 0  # how many times forget() was called

    async def lookup(
        self, kind: str, credential: str, find: Callable[[], Awaitable[T | None]]
    ) -> T | None:
        """The caller *credential* (a token or a session id, of *kind*) is: the one found
        within :attr:`seconds`, else what *find* finds now (kept if found)."""
        key = kind + ":" + hashlib.sha256(credential.encode()).hexdigest()
        now = time.monotonic()
        hit = self._found.get(key)
        if hit is not None and now - hit[0] < self.seconds:
            return hit[1]  # type: ignore[return-value]  # what find() gave for this key
        task = single_flight(self._finding, key, lambda: self._find(key, now, find))
        found: T | None = await asyncio.shield(task)
        return found

    async def _find(
        self, key: str, now: float, find: Callable[[], Awaitable[T | None]]
    ) -> T | None:
        forgotten = self._forgotten
        found = await find()
        if forgotten != self._forgotten:
            return found  # a change came meanwhile: this answer serves only its askers
        if found is None:
            self._found.pop(key, None)
            return None
        if len(self._found) >= self.max_callers:
            self._found.clear()
        self._found[key] = (now, found)
        return found

    def forget(self) -> None:
        """Look every caller up again (lookups running now serve only their askers)."""
        self._found.clear()
        self._finding.clear()
        self._forgotten += 1
