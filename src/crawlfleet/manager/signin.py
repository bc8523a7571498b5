"""Failed sign-ins, slowed per client and logged.

A client (its address as the manager sees it: behind a proxy that uvicorn trusts, the
address the proxy forwards) may fail :data:`FREE_FAILURES` times in a row; every
failure after those makes it wait before its next attempt, twice as long each time
from :data:`FIRST_WAIT_SECONDS` up to :data:`LONGEST_WAIT_SECONDS`. An attempt while it
waits is refused at once (429, ``Retry-After``) without looking at the token, so a
client guesses at most one token per wait. A success forgives the client; so does
:data:`FORGET_SECONDS` without a failure. What is said: a client's first failure, the
first time it is made to wait, then at most once a minute a client (with how many
failed since it was last said). One manager process keeps its own count.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from dataclasses import dataclass

from fastapi import HTTPException, Request

__all__ = [
    "FIRST_WAIT_SECONDS",
    "FORGET_SECONDS",
    "FREE_FAILURES",
    "LONGEST_WAIT_SECONDS",
    "SignInGuard",
    "check_waiting",
    "client_of",
]

logger = logging.getLogger(__name__)

#: failures in a row that cost nothing (a mistyped token, a token pasted twice)
FREE_FAILURES = 5
#: the wait after the first failure past the free ones; it doubles with each one more
FIRST_WAIT_SECONDS = 1.0
LONGEST_WAIT_SECONDS = 60.0
#: a client without a failure for this long starts afresh
FORGET_SECONDS = 15 * 60.0
#: a client's failures are said at most this often
SAY_EVERY_SECONDS = 60.0
#: clients remembered at most (the oldest are forgotten first)
CLIENTS_MAX = 10_000


@dataclass
class _Client:
    failures: int = 0
    #: monotonic time before which its attempts are refused
    wait_until: float = 0.0
    last_failure: float = 0.0
    said_at: float = -math.inf
    unsaid: int = 0


class SignInGuard:
    """The failed sign-ins of every client (see the module docstring)."""

    def __init__(self) -> None:
        self._clients: OrderedDict[str, _Client] = OrderedDict()

    def wait_left(self, client: str, now: float | None = None) -> float:
        """Seconds *client* must still wait before it may try a token (0: it may)."""
        now = time.monotonic() if now is None else now
        known = self._clients.get(client)
        if known is None:
            return 0.0
        if now - known.last_failure >= FORGET_SECONDS:
            del self._clients[client]
            return 0.0
        return max(0.0, known.wait_until - now)

    def failed(self, client: str, now: float | None = None) -> None:
        """*client* tried a token that is not valid."""
        now = time.monotonic() if now is None else now
        known = self._clients.pop(client, None) or _Client()
        self._clients[client] = known  # the most recent last
        while len(self._clients) > CLIENTS_MAX:
            self._clients.popitem(last=False)
        known.failures += 1
        known.unsaid += 1
        known.last_failure = now
        over = known.failures - FREE_FAILURES
        wait = 0.0
        if over > 0:
            wait = min(LONGEST_WAIT_SECONDS, FIRST_WAIT_SECONDS * 2 ** min(over - 1, 16))
            known.wait_until = now + wait
        if known.failures == 1:
            logger.warning("Failed sign-in from %s (a token that is unknown or revoked)", client)
        elif wait and (over == 1 or now - known.said_at >= SAY_EVERY_SECONDS):
            logger.warning(
                "%d failed sign-ins from %s (%d since last said): it waits %.0fs before "
                "its next attempt",
                known.failures,
                client,
                known.unsaid,
                wait,
            )
        else:
            return
        known.said_at, known.unsaid = now, 0

    def succeeded(self, client: str) -> None:
        """*client* signed in: its failures are forgiven."""
        self._clients.pop(client, None)


def client_of(request: Request) -> str:
    """The address *request* comes from, as the manager sees it."""
    return request.client.host if request.client is not None else "unknown"


def check_waiting(guard: SignInGuard, client: str) -> None:
    """HTTPException 429 (with ``Retry-After``) while *client* must wait."""
    left = guard.wait_left(client)
    if left > 0:
        seconds = math.ceil(left)
        raise HTTPException(
            429,
            f"too many failed sign-ins from {client}: try again in {seconds}s",
            headers={"Retry-After": str(seconds)},
        )
