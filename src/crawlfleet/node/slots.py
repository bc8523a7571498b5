"""Leased requests of rate-limited sites, each waiting for its send time (slot).

The lease script grants every request of a rate-limited site a slot on its budget's
schedule (Redis's clock; see :mod:`crawlfleet.frontier.limits`). The scheduler turns
each slot into a time on this process's event-loop clock (:class:`RedisClock`), and
keeps the requests here until then. One timer on the event loop wakes the engine at the
earliest slot: nothing polls.

A request the engine takes too late (more than its ``late`` seconds after its slot:
the node was busy) must not be sent on that slot, or it could land in the same window
as later slots of other nodes: it is returned as late, for the scheduler to give back to
the frontier, where it gets a new slot.

What makes a node late is its own event loop, busy parsing a page (tens of milliseconds
on a page of hundreds of links) when a slot comes due. So the queue notes how late its
timer fires (:meth:`SlotQueue.blocked`: the longest of the last ``BLOCKS_KEPT``), and
the node holds a response back while a slot is due within that time (see
:meth:`crawlfleet.node.scheduler.Scheduler.parse_hold`): the slot goes out first.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = [
    "BLOCKS_KEPT",
    "CLOCK_DRIFT",
    "PARSE_COSTS_KEPT",
    "PARSE_COST_MIN_BYTES",
    "ParseCost",
    "RedisClock",
    "SlotQueue",
]

T = TypeVar("T")

#: Timer firings whose lateness :meth:`SlotQueue.blocked` looks at (the newest).
BLOCKS_KEPT = 64
#: Pages smaller than this teach :class:`ParseCost` nothing (their cost is mostly fixed).
PARSE_COST_MIN_BYTES = 32_768
#: Pages whose cost :class:`ParseCost` keeps (the newest).
PARSE_COSTS_KEPT = 16
#: How fast Redis's clock and this process's may drift apart, at most (NTP slews a clock
#: by up to 500 ppm): what :class:`RedisClock` learned from a lease loses in precision,
#: a second.
CLOCK_DRIFT = 0.0005


class SlotQueue(Generic[T]):
    """Items (leased requests) ordered by send time; *wake* is called (on the event
    loop) when the earliest one is due and nobody asked since it was added."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake
        self._heap: list[tuple[float, int, float, T]] = []  # at, seq, late, item
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        #: how late the timer fired (s), newest last
        self._fired_late: deque[float] = deque(maxlen=BLOCKS_KEPT)

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, at: float, late: float, item: T) -> None:
        """Hold *item* until *at* (``loop.time()``); it may go up to *late* s after."""
        heapq.heappush(self._heap, (at, next(self._seq), late, item))

    def take(self, now: float) -> tuple[T | None, list[T]]:
        """The earliest item that is due at *now* (None: none), and the items found too
        late on the way (to give back). Arms the timer for the next one."""
        missed: list[T] = []
        due: T | None = None
        while self._heap and self._heap[0][0] <= now:
            at, _seq, late, item = heapq.heappop(self._heap)
            if now - at > late:
                missed.append(item)
                continue
            due = item
            break
        self.arm()
        return due, missed

    def arm(self) -> None:
        """Make sure the timer fires at the earliest slot (idempotent)."""
        if not self._heap:
            self._cancel()
            return
        at = self._heap[0][0]
        if self._timer is not None and self._timer_at <= at:
            return
        self._cancel()
        loop = asyncio.get_event_loop()
        self._timer, self._timer_at = loop.call_at(at, self._fire), at

    def next_at(self) -> float | None:
        """The earliest slot (``loop.time()``), or None when empty."""
        return self._heap[0][0] if self._heap else None

    def times(self) -> list[float]:
        """Every slot held (``loop.time()``), earliest first."""
        return sorted(at for at, _seq, _late, _item in self._heap)

    def blocked(self) -> float:
        """How long the event loop was seen blocked when a slot came due: the longest
        lateness of the timer's last firings (s; 0 before any)."""
        return max(self._fired_late, default=0.0)

    def drain(self) -> list[T]:
        """Remove and return every item (in slot order); no timer is left."""
        items = [item for _at, _seq, _late, item in sorted(self._heap)]
        self._heap.clear()
        self._cancel()
        return items

    def _fire(self) -> None:
        late = asyncio.get_event_loop().time() - self._timer_at
        self._fired_late.append(max(0.0, late))
        self._timer, self._timer_at = None, float("inf")
        self._wake()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, float("inf")


class ParseCost:
    """What parsing a page costs this node's event loop, per byte of its body: the
    longest its output blocked the loop at once (the spider's parse, mostly), divided
    by its size, the highest of the last :data:`PARSE_COSTS_KEPT` pages of at least
    :data:`PARSE_COST_MIN_BYTES` (a page the machine slowed down makes the estimate
    cautious, for a while)."""

    def __init__(self) -> None:
        self._per_byte: deque[float] = deque(maxlen=PARSE_COSTS_KEPT)

    def record(self, size: int, blocked: float) -> None:
        """A page of *size* bytes blocked the loop for at most *blocked* seconds."""
        if size >= PARSE_COST_MIN_BYTES:
            self._per_byte.append(blocked / size)

    def estimate(self, size: int) -> float | None:
        """How long a page of *size* bytes will block the loop (s; None: nothing
        learned yet)."""
        return size * max(self._per_byte) if self._per_byte else None


class RedisClock:
    """Where Redis's clock stands against this process's event-loop clock, learned from
    the leases, so that a slot (Redis's time) becomes a time here.

    A lease's reply carries Redis's time when its script ran: somewhere between sending
    the call (*asked*) and reading the reply (*received*), so the offset between the
    clocks lies in an interval as wide as the round trip. The intervals of the leases
    are intersected, each widened by :data:`CLOCK_DRIFT` for its age, so the offset is
    known as closely as the quickest lease lately told it; intervals that do not meet
    mean a clock stepped, and the newest alone counts from there. Each clock (a shard's
    Redis) has its own.

    The offset taken is the middle of that interval, as NTP takes it: exact when the
    way to Redis and the way back take equal time, wherever Redis is. (Taken at the
    interval's edge, never early, slots came late by the whole round trip: with Redis
    5 ms away every slot was missed, and the site was never crawled.) On a path whose
    two directions differ by D, a node's slots are off by D / 2; a node busy when a
    reply arrives only widens its interval, and the quick leases narrow it again."""

    def __init__(self) -> None:
        #: clock -> (lowest offset, highest offset, event-loop time they were known at)
        self._known: dict[str, tuple[float, float, float]] = {}

    def offset(
        self, clock: str, redis_us: int, asked: float, received: float
    ) -> tuple[float, float]:
        """Learn from a lease that read *redis_us* on *clock* between event-loop times
        *asked* and *received*. The offset of the clocks (Redis's time minus the event
        loop's, s): a slot at Redis time T is due at T minus it here; and how far it
        may be off either way if the two directions of the way were not equal (s: half
        the interval the offset is known in)."""
        redis_now = redis_us / 1_000_000
        low, high = redis_now - received, redis_now - asked
        known = self._known.get(clock)
        if known is not None:
            known_low, known_high, at = known
            widen = max(0.0, received - at) * CLOCK_DRIFT
            known_low, known_high = known_low - widen, known_high + widen
            if known_low <= high and low <= known_high:
                low, high = max(low, known_low), min(high, known_high)
        self._known[clock] = (low, high, received)
        return (low + high) / 2, (high - low) / 2
