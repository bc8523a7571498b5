"""RedisClock: a slot on Redis's clock becomes a time on the event loop's, at the middle
of what the quickest lease lately told of the offset, wherever Redis is."""

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


@pytest.mark.parametrize("one_way", [0.0005, 0.0025, 0.025])
def test_redis_far_away_on_an_even_path_places_slots_exactly(one_way: float) -> None:
    """Redis 1, 5 or 50 ms away: a slot is due when Redis's clock says, not a round
    trip late (every slot was missed so, and a site 5 ms from Redis never crawled)."""
    offset, off_by = lease(RedisClock(), 10.0, 10.0 + one_way, 10.0 + 2 * one_way)
    assert offset == pytest.approx(TRUE)
    assert off_by == pytest.approx(one_way)  # were the way there and back uneven


def test_one_lease_is_as_sure_as_half_its_round_trip() -> None:
    offset, off_by = lease(RedisClock(), 10.0, 10.004, 10.010)
    assert offset == pytest.approx(TRUE - 0.001)
    assert off_by == pytest.approx(0.005)


def test_a_slow_reply_after_a_quick_one_keeps_the_quick_ones_precision() -> None:
    clock = RedisClock()
    lease(clock, 10.0, 10.0005, 10.001)  # quick: the offset within 1 ms
    # the script ran at once, its reply was read 30 ms later (a busy node)
    offset, off_by = lease(clock, 10.5, 10.5005, 10.530)
    assert off_by <= (0.001 + 2 * 0.53 * CLOCK_DRIFT) / 2
    assert abs(offset - TRUE) <= off_by
    # the same lease alone: its slots 14.5 ms late
    alone, alone_off_by = lease(RedisClock(), 10.5, 10.5005, 10.530)
    assert TRUE - alone == pytest.approx(0.0145)
    assert alone_off_by == pytest.approx(0.015)


def test_what_was_learned_widens_with_time() -> None:
    clock = RedisClock()
    lease(clock, 0.0, 0.0005, 0.001)
    _offset, off_by = lease(clock, 100.0, 100.1, 100.2)
    assert off_by == pytest.approx((0.001 + 2 * (100.2 - 0.001) * CLOCK_DRIFT) / 2)


@pytest.mark.parametrize("step", [-0.5, 0.5])
def test_a_clock_that_stepped_is_learned_again_from_the_newest_lease(step: float) -> None:
    clock = RedisClock()
    lease(clock, 10.0, 10.0005, 10.001)
    redis_us = round((11.0005 + TRUE + step) * 1_000_000)
    offset, off_by = clock.offset("", redis_us, 11.0, 11.002)
    assert offset == pytest.approx(TRUE + step - 0.0005)
    assert off_by == pytest.approx(0.001)


def test_each_clock_is_learned_apart() -> None:
    """Two shards' Redis servers, their clocks 0.2 s apart: neither narrows the other."""
    clock = RedisClock()
    lease(clock, 10.0, 10.0005, 10.001, "0")
    offset, off_by = clock.offset("1", round((10.5005 + TRUE + 0.2) * 1_000_000), 10.5, 10.510)
    assert offset == pytest.approx(TRUE + 0.2 - 0.0045)
    assert off_by == pytest.approx(0.005)
