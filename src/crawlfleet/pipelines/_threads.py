"""Bridges between the reactor (or asyncio loop) and worker threads.

Both work under Scrapy's asyncio reactor, under another Twisted reactor, and under a
bare asyncio loop (tests run coroutines with ``asyncio.run``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

from twisted.internet.defer import Deferred

__all__ = ["Completion", "Wakeup", "run_in_thread", "settle"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def run_in_thread(func: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """Run ``func(*args, **kwargs)`` on a worker thread and await its result."""
    if _running_loop() is not None:
        return await asyncio.to_thread(func, *args, **kwargs)
    from twisted.internet.threads import deferToThread

    result: _T = await deferToThread(func, *args, **kwargs)
    return result


class Wakeup:
    """Awaitables that a worker thread can complete: :meth:`wait` (reactor side) returns
    an awaitable that resolves at the next :meth:`notify_all` (any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: list[Callable[[], None]] = []

    def wait(self) -> Awaitable[Any]:
        """An awaitable resolved by the next :meth:`notify_all`. Call from the loop."""
        loop = _running_loop()
        if loop is not None:
            future: asyncio.Future[None] = loop.create_future()

            def wake_future() -> None:
                # A closed loop (RuntimeError) has nobody waiting any more.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_resolve, future)

            self._add(wake_future)
            return future
        from twisted.internet import reactor

        deferred: Deferred[None] = Deferred()

        def wake_deferred() -> None:
            reactor.callFromThread(_fire, deferred)

        self._add(wake_deferred)
        return deferred

    def _add(self, waker: Callable[[], None]) -> None:
        with self._lock:
            self._waiters.append(waker)

    def notify_all(self) -> None:
        """Resolve every pending :meth:`wait`. Safe from any thread."""
        with self._lock:
            waiters, self._waiters = self._waiters, []
        for waker in waiters:
            waker()


class Completion:
    """A one-shot outcome that a worker thread settles and the reactor side awaits.

    Create it on the reactor (or loop) thread; ``await completion.wait()`` returns once
    :func:`settle` was called with it and no error, or raises the error given."""

    __slots__ = ("_deferred", "_future", "_loop")

    def __init__(self) -> None:
        self._loop = _running_loop()
        self._future: asyncio.Future[None] | None = None
        self._deferred: Deferred[None] | None = None
        if self._loop is not None:
            self._future = self._loop.create_future()
        else:
            self._deferred = Deferred()

    def wait(self) -> Awaitable[None]:
        """The awaitable of the outcome (call from the thread that created it)."""
        if self._future is not None:
            return self._future
        assert self._deferred is not None
        return self._deferred

    def _settle(self, error: BaseException | None) -> None:
        if self._future is not None:
            if not self._future.done():
                if error is None:
                    self._future.set_result(None)
                else:
                    self._future.set_exception(error)
        elif self._deferred is not None and not self._deferred.called:
            if error is None:
                self._deferred.callback(None)
            else:
                self._deferred.errback(error)


def settle(completions: list[Completion], error: BaseException | None = None) -> None:
    """Settle *completions* (success, or *error*). Safe from any thread: one hop to each
    loop for the whole list, not one per completion. A closed loop has nobody waiting."""
    if not completions:
        return
    by_loop: dict[asyncio.AbstractEventLoop | None, list[Completion]] = {}
    for completion in completions:
        by_loop.setdefault(completion._loop, []).append(completion)

    def run(group: list[Completion]) -> None:
        for completion in group:
            completion._settle(error)

    for loop, group in by_loop.items():
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(run, group)
        else:
            from twisted.internet import reactor

            reactor.callFromThread(run, group)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _fire(deferred: Deferred[None]) -> None:
    if not deferred.called:
        deferred.callback(None)
