"""SiteRates: requests done per site over a sliding window, and the leases held."""

from __future__ import annotations

import pytest

from crawlfleet.node.siterates import SITES_SHOWN, SiteRates


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rates_over_the_window_and_leases_held() -> None:
    clock = Clock()
    rates = SiteRates(10.0, clock)
    for _ in range(10):  # 5 requests a second for 10 s on a, 1 a second on b
        for _ in range(5):
            rates.done("a")
        rates.done("b")
        clock.now += 1.0
    figures = rates.figures(["a", "c", "c"])
    # one-second buckets: the oldest second leaves the window as the clock reaches it
    assert figures["a"]["done_per_min"] == pytest.approx(300, rel=0.1)
    assert figures["b"]["done_per_min"] == pytest.approx(60, rel=0.1)
    assert [figures[s]["leased"] for s in "abc"] == [1, 0, 2]
    assert figures["c"]["done_per_min"] == 0.0
    assert list(figures) == ["a", "b", "c"]  # busiest first
    clock.now += 11.0  # the window moves on: only the leases are left
    assert rates.figures(["c"]) == {"c": {"leased": 1, "done_per_min": 0.0}}


def test_a_young_node_counts_its_rate_over_its_own_age() -> None:
    clock = Clock()
    rates = SiteRates(60.0, clock)
    clock.now += 2.0
    for _ in range(20):
        rates.done("a")
    assert rates.figures([])["a"]["done_per_min"] == 600.0  # 20 in 2 s


def test_at_most_the_busiest_sites_are_shown() -> None:
    rates = SiteRates(60.0, Clock())
    for i in range(SITES_SHOWN + 10):
        for _ in range(i + 1):
            rates.done(f"site{i:02d}")
    shown = rates.figures([])
    assert len(shown) == SITES_SHOWN and "site00" not in shown and f"site{SITES_SHOWN + 9}" in shown
    with pytest.raises(ValueError, match="window_seconds"):
        SiteRates(0)
