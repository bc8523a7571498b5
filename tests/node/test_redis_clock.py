"""RedisClock: a slot on Redis's clock becomes a time on the event loop's, never early
and as close as the quickest lease lately told the offset."""

from __future__ import annotations

import pytest

from crawlfleet.node.slots import CLOCK_DRIFT, RedisClock

#: Redis's clock stands this far ahead of the event loop's in these tests (s)
TRUE = 1_000.0


def lease(
    clock: RedisClock, asked: float, ran: float, received: float, name: str = ""
) -> tuple[float, float]:
    """A lease asked at *asked*, its script run at *ran* and its reply read at
    *received* (event-loop times): what the clock makes of it."""
    return clock.offset(name, round((ran + TRUE) * 1_000_000), asked, received)


def test_one_lease_is_as_unsure_as_its_round_trip_and_never_early() -> None:
    offset, unsure = lease(RedisClock(), 10.0, 10.004, 10.010)
    assert offset == pytest.approx(TRUE - 0.006)  # counted from the reply: late, not early
    assert unsure == pytest.approx(0.010)


def test_a_slow_reply_after_a_quick_one_keeps_the_quick_ones_precision() -> None:
    clock = RedisClock()
    lease(clock, 10.0, 10.0005, 10.001)  # quick: the offset within 1 ms
    # the script ran at once, its reply was read 30 ms later (a busy node)
    offset, unsure = lease(clock, 10.5, 10.5005, 10.530)
    assert unsure <= 0.001 + 2 * 0.53 * CLOCK_DRIFT
    assert TRUE - unsure <= offset <= TRUE  # a slot is due at most that late, never early
    # the same lease alone: its slots 29.5 ms late, more than a slot may be late
    alone, alone_unsure = lease(RedisClock(), 10.5, 10.5005, 10.530)
    assert TRUE - alone == pytest.approx(0.0295)
    assert alone_unsure == pytest.approx(0.030)


def test_what_was_learned_widens_with_time() -> None:
    clock = RedisClock()
    lease(clock, 0.0, 0.0005, 0.001)
    _offset, unsure = lease(clock, 100.0, 100.1, 100.2)
    assert unsure == pytest.approx(0.001 + 2 * (100.2 - 0.001) * CLOCK_DRIFT)


@pytest.mark.parametrize("step", [-0.5, 0.5])
def test_a_clock_that_stepped_is_learned_again_from_the_newest_lease(step: float) -> None:
    clock = RedisClock()
    lease(clock, 10.0, 10.0005, 10.001)
    redis_us = round((11.0005 + TRUE + step) * 1_000_000)
    offset, unsure = clock.offset("", redis_us, 11.0, 11.002)
    assert offset == pytest.approx(TRUE + step - 0.0015)
    assert unsure == pytest.approx(0.002)


def test_each_clock_is_learned_apart() -> None:
    """Two shards' Redis servers, their clocks 0.2 s apart: neither narrows the other."""
    clock = RedisClock()
    lease(clock, 10.0, 10.0005, 10.001, "0")
    offset, unsure = clock.offset("1", round((10.5005 + TRUE + 0.2) * 1_000_000), 10.5, 10.510)
    assert offset == pytest.approx(TRUE + 0.2 - 0.0095)
    assert unsure == pytest.approx(0.010)
