"""Waiting for a service that does not answer: one back-off and one outage report for
every loop that waits one out (Redis for nodes, item workers and commands; item stores;
the state DB for the error registry, campaigns and the manager).

:class:`Backoff` says how long to wait before the next try, :class:`Outage` when the
outage began and what to say when it begins, lasts and ends; :func:`until_reachable`
puts both around a call that must get through, :meth:`Outage.attempt` around one turn
of a loop that goes on."""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from crawlfleet.redis.connection import REDIS_ERRORS, redact

__all__ = ["Backoff", "Failures", "GaveUp", "Outage", "until_reachable"]

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
    """An outage of *service* as a loop sees it: when it began, said when it begins,
    again every *every* seconds while it lasts (0: at every failure; None: never), and
    at its end with its length. It counts from the start of the first call that failed
    or hung (not from when its failure was seen: a hung call is seen only at its socket
    timeout).

    The words are the loop's own, said in its own logger or on its screen:
    *say_down* (the error) when the outage begins, *say_still* (the error and the
    seconds since it began) while it lasts, *say_back* (the seconds it lasted) at its
    end. One left out says a node's words, in this module's logger: the node goes on
    meanwhile, *holding* (called when a line is said) tells what waits, and *describe*
    what failed (default: the error's class and message, passwords redacted).
    *clock* is what :attr:`since` counts on: ``time.monotonic``, or ``time.time`` where
    the start is shown as a time of day."""

    def __init__(
        self,
        service: str,
        holding: Callable[[], str] = str,
        every: float | None = 60.0,
        *,
        describe: Callable[[BaseException], str] | None = None,
        say_down: Callable[[BaseException], None] | None = None,
        say_still: Callable[[BaseException, float], None] | None = None,
        say_back: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.service = service
        self.holding = holding
        #: when the outage began, on *clock* (None: none now, the last call succeeded)
        self.since: float | None = None
        self._said = 0.0  # when it was last said
        self.every = every
        self.describe = describe or _described
        self.clock = clock
        self._say_down = say_down or self._node_down
        self._say_still = say_still or self._node_still
        self._say_back = say_back

    def failed(self, exc: BaseException, began: float | None = None) -> None:
        """A call failed with *exc*; *began*: when it started (on :attr:`clock`;
        default: now)."""
        now = self.clock()
        if self.since is None:
            self.since = min(now, began) if began is not None else now
            self._said = now
            self._say_down(exc)
        elif self.every is not None and now - self._said >= self.every:
            self._said = now
            self._say_still(exc, now - self.since)

    def succeeded(self, what_waited: Callable[[], str] = str) -> float | None:
        """A call succeeded: the outage under way (if any) ends and is said; returns
        how long it lasted (None: there was none). *what_waited* completes a node's
        words (see the class docstring)."""
        if self.since is None:
            return None
        seconds = self.clock() - self.since
        self.since = None
        if self._say_back is not None:
            self._say_back(seconds)
        else:
            logger.warning(
                "%s reachable again after %.1fs; %s", self.service, seconds, what_waited()
            )
        return seconds

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
        began = self.clock()
        try:
            await call()
        except REDIS_ERRORS as exc:
            self.failed(exc, began)
            await wait(backoff.next())
            return False
        self.succeeded(waited)
        backoff.reset()
        return True

    def _node_down(self, exc: BaseException) -> None:
        logger.warning(
            "%s unreachable (%s): the node goes on with what it holds and retries; %s, "
            "nothing is lost",
            self.service,
            self.describe(exc),
            self.holding(),
        )

    def _node_still(self, exc: BaseException, seconds: float) -> None:
        logger.warning(
            "%s still unreachable after %.0fs (%s); %s",
            self.service,
            seconds,
            self.describe(exc),
            self.holding(),
        )


class Failures:
    """What a loop says of its unexpected failures (a bug, odd input: not an outage,
    which :class:`Outage` reports): the first with its traceback, then at most one line
    every *every* seconds with how many failed since and the last error, and one line
    when a turn succeeds again. Never a traceback a second.

    Call :meth:`failed` inside the ``except`` block (it reads the exception being
    handled), :meth:`succeeded` after a turn that went through."""

    def __init__(self, what: str, log: logging.Logger, every: float = 60.0) -> None:
        self.what = what
        self.log = log
        self.every = every
        #: failures since the last success
        self.count = 0
        self._unsaid = 0
        self._said_at = -math.inf

    def failed(self) -> None:
        """Count the exception being handled; say it when it is due."""
        self.count += 1
        self._unsaid += 1
        now = time.monotonic()
        if self.count == 1:
            self.log.exception("%s failed", self.what)
        elif now - self._said_at >= self.every:
            exc = sys.exc_info()[1]
            self.log.error(
                "%s failed %d more times since it was last said; the last: %s",
                self.what,
                self._unsaid,
                _described(exc) if exc is not None else "?",
            )
        else:
            return
        self._said_at, self._unsaid = now, 0

    def succeeded(self) -> None:
        """A turn went through: say so if failures were said."""
        if self.count:
            self.log.info("%s works again after %d failures", self.what, self.count)
        self.count = self._unsaid = 0
        self._said_at = -math.inf


def _described(exc: BaseException) -> str:
    """``Type: message`` of *exc*, without a password that its message may carry."""
    return f"{type(exc).__name__}: {redact(str(exc))}"
