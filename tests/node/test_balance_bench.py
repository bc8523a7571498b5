"""The load-balancing part of the benchmark: figures and targets from the site's
per-client counts (the runs themselves are the benchmark's, not the tests')."""

from __future__ import annotations

from typing import Any

from crawlfleet.benchmark.balance import _result, balance_targets


def site_stats(clients: dict[str, tuple[int, float, float]], **extra: Any) -> dict[str, Any]:
    total = sum(n for n, _, _ in clients.values())
    first = min(f for _, f, _ in clients.values())
    last = max(t for _, _, t in clients.values())
    return {
        "total_requests": total,
        "active_seconds": last - first,
        "fetched_twice": [],
        "never_fetched": [],
        "clients": {
            label: {"requests": n, "first": f, "last": t} for label, (n, f, t) in clients.items()
        },
        **extra,
    }


def test_equal_nodes_are_judged_by_their_shares() -> None:
    even = _result("equal", 100, site_stats({"a": (52, 0, 10), "b": (48, 0, 10)}), [0, 0])
    skewed = _result("equal", 100, site_stats({"a": (60, 0, 10), "b": (40, 0, 10)}), [0, 0])
    assert all(balance_targets([even]).values())
    met = balance_targets([skewed])
    assert met["balance/equal: each node 50% +/- 5% (measured 40.0% / 60.0%)"] is False


def test_uneven_nodes_are_judged_against_their_summed_capacity() -> None:
    # fast: 300 pages in 10 s (30/s); slow: 100 in 10 s (10/s): ideal 400 / 40 = 10 s
    r = _result("uneven", 400, site_stats({"fast": (300, 0, 10), "slow": (100, 0.5, 10.5)}), [0])
    assert r.ideal_seconds == 10.0 and r.slow_tail_seconds == 0.5
    assert all(balance_targets([r]).values())
    # the slow node kept a backlog: 4 s after the fast one finished
    late = _result("uneven", 400, site_stats({"fast": (300, 0, 10), "slow": (100, 0, 14)}), [0])
    met = balance_targets([late])
    assert met["balance/uneven: no backlog on the slow node (tail 4.00s)"] is False
    assert any(k.startswith("balance/uneven: within 15%") and not v for k, v in met.items())


def test_lost_pages_and_a_late_joiner_miss_their_targets() -> None:
    r = _result("join", 10, site_stats({"first": (8, 0, 5), "late": (2, 9, 10)}), [0, 0])
    r.join_delay_seconds = 6.5
    met = balance_targets([r])
    assert met["balance/join: the new node pulls within 5 s (measured 6.5s)"] is False
    lost = _result("kill", 10, site_stats({"survivor": (9, 0, 5)}, never_fetched=["u"]), [0])
    assert balance_targets([lost]) == {"balance/kill: nothing lost": False}
