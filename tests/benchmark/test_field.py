"""The field part of ``crawlfleet bench``: polite and CPU-bound crawls with Redis behind
a delaying proxy and beside CPU hogs. Rates are printed, not asserted here: these tests
check the figures' shape, what cannot vary (every page fetched once), the targets'
verdicts on given figures, and that nothing the part starts outlives it."""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import redis
from rich.console import Console

from crawlfleet.benchmark.field import (
    FieldCpuResult,
    FieldHost,
    FieldPoliteResult,
    _host_figures,
    cpu_hogs,
    delayed_redis,
    field_delays,
    field_hogs,
    most_in_window,
)
from crawlfleet.benchmark.reports.field import field_cpu_report, field_polite_report
from crawlfleet.cli import bench
from crawlfleet.exceptions import ConfigError


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_most_in_a_window_counts_requests_closer_than_its_length() -> None:
    assert most_in_window([], 0.5) == (0, 0.0)
    assert most_in_window([0.0, 0.5, 1.0], 0.5) == (1, 0.0)  # (t - 0.5, t]: 0.5 apart is fine
    assert most_in_window([0.0, 0.5, 0.9, 1.6], 0.5) == (2, 0.9)
    assert most_in_window([0.0, 0.1, 0.2, 0.95, 1.05], 1.0) == (4, 0.95)


def test_a_host_over_its_budget_is_told_from_the_sites_own_stall() -> None:
    """Requests 490 ms apart on a 1-per-0.5-s budget: 10 ms too close; a site stall of
    30 ms over them explains it, one of 4 ms does not."""
    for stall, beyond in ((30.0, 0.0), (4.0, 6.0)):
        stats = {
            "arrivals": {"127.0.0.2": [0.0, 0.6, 1.09, 1.7]},
            "requests": {"a": 1, "b": 2},
            "loop_stalls": {"stalls": [[0.2, 50.0], [0.9, stall]]},
        }
        h = _host_figures(stats, 1, ["a", "b", "c"], "1/0.5s", 1, 0.5)
        assert (h.most_in_window, h.over_by_ms, h.stall_in_window_ms) == (2, 10.0, stall)
        assert h.beyond_stall_ms == pytest.approx(beyond) and h.busiest_window == [0.6, 1.09]
        assert (h.requests, h.fetched_twice, h.never_fetched, h.min_gap_ms) == (4, 1, 1, 490.0)


def test_the_options_are_read_or_named() -> None:
    assert field_delays("50,0,5") == [0.0, 5.0, 50.0]
    assert field_hogs("0,2x", cores=2) == [0, 4]
    assert field_hogs("3") == [3]
    for bad in ("5,50", "0,-1", "x"):
        with pytest.raises(ConfigError, match="--field-delays"):
            field_delays(bad)
    for bad in ("two", "", "2y"):
        with pytest.raises(ConfigError, match="--field-hogs"):
            field_hogs(bad)


def test_hogs_and_the_proxy_end_with_their_block_even_on_ctrl_c(redis_server_url: str) -> None:
    before = _children()
    with (
        pytest.raises(KeyboardInterrupt),
        cpu_hogs(2, 60) as hogs,
        delayed_redis(redis_server_url, 5) as url,
    ):
        assert url.startswith("redis://127.0.0.1:")
        raise KeyboardInterrupt
    assert len(hogs) == 2 and all(h.poll() is not None for h in hogs)
    assert _children() <= before
    with pytest.raises(ConfigError, match=r"127\.0\.0\.1"), delayed_redis("unix:///tmp/r.sock", 5):
        pass


def _host(host: str, requests: int, most: int, allowed: int, window: float) -> FieldHost:
    return FieldHost(
        host=host,
        budget=f"{allowed}/{window:g}s",
        allowed=allowed,
        window_seconds=window,
        pages=requests,
        requests=requests,
        seconds=10.0,
        most_in_window=most,
        min_gap_ms=40.0,
        fetched_twice=0,
        never_fetched=0,
        over_by_ms=0.0 if most <= allowed else 12.0,
        stall_in_window_ms=1.0,
    )


def _polite(delay: float, hogs: int, use: float, most: int, late: int) -> FieldPoliteResult:
    requests = round(use * 20 * 10) + 1  # (requests - 1) / 10 s against 20/s
    return FieldPoliteResult(
        delay_ms=delay,
        hogs=hogs,
        nodes=4,
        hosts=[_host("127.0.0.1", requests, most, 20, 1.0), _host("127.0.0.2", 20, 1, 1, 0.5)],
        pages=requests + 20,
        late=late,
        site_stall_max_ms=3.0,
        exit_codes=[0, 0, 0, 0],
    )


def test_the_polite_targets_depend_on_the_delay_and_the_hogs() -> None:
    out = io.StringIO()
    targets = field_polite_report(
        Console(file=out, width=250),
        [
            _polite(0, 0, 0.97, 20, 0),
            _polite(50, 0, 0.92, 20, 3),
            _polite(0, 4, 0.93, 21, 30),
        ],
    )
    table = out.getvalue()
    for column in ("delay ms", "hogs", "use", "target", "most in a window", "over by", "never"):
        assert column in table
    verdicts = {name.split(" (")[0]: ok for name, ok in targets.items()}
    assert verdicts == {
        "field polite, no hogs: never over the budget in any window beyond what the site's "
        "own stalls explain": True,
        "field polite, no hogs: budget used >= 95% at 0 ms": True,
        "field polite, no hogs: budget used >= 90% at 50 ms": True,
        "field polite, 4 hogs: never over the budget in any window beyond what the site's "
        "own stalls explain": False,
        "field polite, 4 hogs: budget used >= 90% at every delay": True,
        "field polite, 4 hogs: given back <= 5% of pages at every delay": False,
        "field polite: every page fetched once": True,
    }


def test_the_cpu_bound_targets_are_ratios_to_the_0_ms_run() -> None:
    def run(delay: float, ratio: float) -> FieldCpuResult:
        return FieldCpuResult(delay, 0, 4, 300, 316, 100 * ratio, 3.0, 0, 0, 0.3, 0, [0], ratio)

    targets = field_cpu_report(Console(file=io.StringIO()), [run(0, 1), run(5, 0.97), run(50, 0.7)])
    assert [ok for ok in targets.values()] == [True, False, True]


@pytest.fixture
def bench_prefix(key_prefix: str, sync_redis: redis.Redis) -> Iterator[str]:
    """The key prefix of this test's bench: its keys are deleted afterwards."""
    yield key_prefix
    for key in sync_redis.scan_iter(match=f"{key_prefix}bench*", count=1000):
        sync_redis.delete(key)


@pytest.mark.slow
def test_the_field_part_runs_and_every_page_is_fetched_once(
    redis_server_url: str, bench_prefix: str, tmp_path: Path
) -> None:
    """2 nodes, Redis 0 and 20 ms away, no hogs: short polite runs and a small crawl."""
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    results = tmp_path / "field.json"
    args = parser.parse_args(
        [
            "--only=field",
            "--field-delays=0,20",
            "--field-hogs=0",
            "--field-nodes=2",
            "--field-seconds=2",
            "--field-pages=150",
            f"--redis-url={redis_server_url}",
            f"--json={results}",
            "-s",
            f"CRAWLFLEET_KEY_PREFIX={bench_prefix}",
        ]
    )
    before = _children()
    assert bench.run(args) in (0, 1)  # 1: a rate target missed on a busy machine
    assert _children() <= before  # no proxy, hog, node or site left
    report = json.loads(results.read_text())
    assert report["complete"]
    polite, cpu = report["field_polite"], report["field_cpu"]
    assert [(r["delay_ms"], r["hogs"], r["nodes"]) for r in polite] == [(0, 0, 2), (20, 0, 2)]
    for r in polite:
        assert [h["budget"] for h in r["hosts"]] == ["20/1s", "1/0.5s (DOWNLOAD_DELAY)"]
        assert [(h["allowed"], h["window_seconds"]) for h in r["hosts"]] == [(20, 1.0), (1, 0.5)]
        assert not r["stopped"] and r["exit_codes"] == [0, 0]
        for h in r["hosts"]:
            assert (h["fetched_twice"], h["never_fetched"]) == (0, 0)
            assert h["requests"] == h["pages"] > 0
    assert [r["delay_ms"] for r in cpu] == [0, 20, 0]  # 0 ms before and after
    assert max(r["ratio"] for r in cpu if r["delay_ms"] == 0) == 1.0
    for r in cpu:
        assert (r["fetched_twice"], r["never_fetched"]) == (0, 0)
        assert r["requests"] >= 150 and r["exit_codes"] == [0, 0]
    assert any("field polite" in name for name in report["targets"])
