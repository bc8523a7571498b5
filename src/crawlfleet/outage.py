"""Waiting for a service that does not answer: one back-off and one outage report for
every loop that talks to Redis (nodes, item workers, commands): :func:`until_reachable`
for a call that must get through, :meth:`Outage.attempt` for a loop that goes on."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from crawlfleet.redis.connection import REDIS_ERRORS, redact

__all__ = ["Backoff", "GaveUp", "Outage", "until_reachable"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Backoff:
    """Waits that start at *first* seconds and double up to *longest*."""

    def __init__(self, first: float, longest: float) -> None:
        if not 0 <= first <= longest:
            raise ValueError(f"back-off needs 0 <= first <= longest, got {first}, {longest}")
        self.first = first
        self.longest = longest
        self.delay = first

    def next(self) -> float:
        """The wait to take now; the one after it is twice as long (up to *longest*)."""
        delay = self.delay
        self.delay = min(max(delay * 2, self.first), self.longest)
        return delay

    def reset(self) -> None:
        """A success: the next failure waits *first* again."""
        self.delay = self.first


#: The least time the last attempt of a bounded :func:`until_reachable` is given.
LAST_ATTEMPT_SECONDS = 1.0


class GaveUp(Exception):
    """:func:`until_reachable` gave up: Redis did not answer within its time limit;
    ``last`` is the last error, ``seconds`` how long it tried."""

    def __init__(self, last: BaseException, seconds: float) -> None:
        super().__init__(f"{type(last).__name__}: {redact(str(last))}")
        self.last = last
        self.seconds = seconds


async def until_reachable(
    what: str,
    call: Callable[[], Awaitable[T]],
    backoff: Backoff,
    *,
    give_up_after: float | None = None,
) -> T:
    """``await call()`` until Redis answers, waiting by *backoff* and saying each time
    that it cannot *what*. With *give_up_after* (seconds), it tries until that long after
    the first attempt (the last attempt may run LAST_ATTEMPT_SECONDS past it), then
    raises :class:`GaveUp` (the last failure is not logged: the caller says it once)."""
    started = time.monotonic()
    deadline = None if give_up_after is None else started + give_up_after
    while True:
        try:
            if deadline is None:
                result = await call()
            else:
                left = max(deadline - time.monotonic(), LAST_ATTEMPT_SECONDS)
                result = await asyncio.wait_for(call(), left)
        except (TimeoutError, *REDIS_ERRORS) as exc:
            delay = backoff.next()
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    if not str(exc):  # wait_for's own timeout says nothing
                        exc = TimeoutError("no answer")
                    raise GaveUp(exc, time.monotonic() - started) from None
                delay = min(delay, left)
            logger.warning(
                "Redis unreachable, cannot %s (%s); retrying in %.1fs",
                what,
                redact(str(exc)),
                delay,
            )
            await asyncio.sleep(delay)
        else:
            backoff.reset()
            return result


class Outage:
    """An outage of *service* as a loop sees it: said at once, then every
    *every* seconds while it lasts, and its end with its duration, counted from the
    start of the first call that failed or hung (not from when its failure was seen: a
    hung call is seen only at its socket timeout). *holding* says what waits meanwhile
    (called when a line is logged); *describe* says what failed (default: the error's
    class and message, passwords redacted)."""

    def __init__(
        self,
        service: str,
        holding: Callable[[], str],
        every: float = 60.0,
        *,
        describe: Callable[[BaseException], str] | None = None,
    ) -> None:
        self.service = service
        self.holding = holding
        self.every = every
        self.describe = describe or _described
        #: monotonic time the outage began (None: none now)
        self.since: float | None = None
        self._logged = 0.0

    def failed(self, exc: BaseException, began: float | None = None) -> None:
        """A call failed with *exc*; *began*: when it started (``time.monotonic()``;
        default: now)."""
        now = time.monotonic()
        what = self.describe(exc)
        if self.since is None:
            self.since = min(now, began) if began is not None else now
            self._logged = now
            logger.warning(
                "%s unreachable (%s): the node goes on with what it holds and retries; %s, "
                "nothing is lost",
                self.service,
                what,
                self.holding(),
            )
        elif now - self._logged >= self.every:
            self._logged = now
            logger.warning(
                "%s still unreachable after %.0fs (%s); %s",
                self.service,
                now - self.since,
                what,
                self.holding(),
            )

    def succeeded(self, what_waited: Callable[[], str]) -> None:
        if self.since is not None:
            logger.warning(
                "%s reachable again after %.1fs; %s",
                self.service,
                time.monotonic() - self.since,
                what_waited(),
            )
            self.since = None

    async def attempt(
        self,
        call: Callable[[], Awaitable[object]],
        backoff: Backoff,
        *,
        waited: Callable[[], str],
        wait: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> bool:
        """One turn of a loop that goes on through an outage: ``await call()``. When
        Redis does not answer (REDIS_ERRORS), the failure is said as :meth:`failed` says
        it (counted from when the call began), *wait* is awaited with *backoff*'s next
        delay (the loop's own sleep: it may cut it short), and False is returned. When it
        answers, an outage ends (:meth:`succeeded`, saying what *waited*), the back-off
        starts over, and True is returned. Other errors go to the caller."""
        began = time.monotonic()
        try:
            await call()
        except REDIS_ERRORS as exc:
            self.failed(exc, began)
            await wait(backoff.next())
            return False
        self.succeeded(waited)
        backoff.reset()
        return True


def _described(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {redact(str(exc))}"
