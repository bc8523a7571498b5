"""Nodes with wrong wall clocks still keep a site under its cluster-wide rate limit.

The lease script paces each rate-limited site on the Redis clock (``TIME``), never on a
node's clock. This test runs four real node processes against the bundled test site
with every site limited to "2/1s"; three of them have a wall clock that is wrong: an
hour fast, an hour slow, a few seconds fast. Were a site's next allowed time
set and compared on node clocks, a node whose clock is ahead would take a request at
once after one whose clock is behind had paced the site, and the site would see more
than 2 requests in a second (while the node an hour ahead would lock the others out).

How the clocks are skewed: a ``sitecustomize.py`` in a directory put first on the
nodes' PYTHONPATH replaces ``time.time`` and ``time.time_ns`` at interpreter start-up,
before Scrapy, Twisted or crawlfleet are imported, with versions shifted by
``CRAWLFLEET_TEST_CLOCK_SKEW_SECONDS``. ``time.monotonic`` is left alone, as it would be
on a machine whose wall clock is wrong; so is ``datetime.now``, which reads the system
clock in C (crawlfleet's frontier does not use it).

How the skew is shown to be real: the hook appends its pid and the shift it applied to
a report file, which must name every node's pid; and the timestamps of each node's
Scrapy log lines, which the ``logging`` module takes from ``time.time``/``time_ns``
inside the node, must lie within the run's real time span shifted by that node's skew.
And the mechanism itself is checked: each site's pace time left in Redis must lie within
the run on the Redis clock (give or take a minute), not an hour away from it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
import redis

from crawlfleet.node.launcher import wait_all
from crawlfleet.redis.keys import JobKeys
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import TestSite
from tests.support.nodes import limited_nodes

SKEW_VAR = "CRAWLFLEET_TEST_CLOCK_SKEW_SECONDS"
REPORT_VAR = "CRAWLFLEET_TEST_CLOCK_REPORT"

#: each node's wall-clock error in seconds: one right, one an hour ahead, one an hour
#: behind, one a few seconds ahead (more than the 0.5 s between two requests at 2/1s)
SKEWS = (0.0, 3600.0, -3600.0, 7.0)
LIMIT = "2/1s"
MARGIN = 0.2
PACE_SLACK_MS = 60_000

SITECUSTOMIZE = f'''\
"""Test hook: shift this process's wall clock by ${SKEW_VAR} seconds."""

import json
import os
import time

_skew = float(os.environ.get("{SKEW_VAR}") or 0)
if _skew:
    _real_time, _real_time_ns, _skew_ns = time.time, time.time_ns, round(_skew * 1e9)

    def _skewed_time() -> float:
        return _real_time() + _skew

    def _skewed_time_ns() -> int:
        return _real_time_ns() + _skew_ns

    time.time = _skewed_time
    time.time_ns = _skewed_time_ns

_report = os.environ.get("{REPORT_VAR}")
if _report:
    with open(_report, "a") as _f:
        _f.write(json.dumps({{"pid": os.getpid(), "skew": _skew}}) + "\\n")
'''

#: the start of a Scrapy log line: "2025-01-31 12:34:56 [logger] LEVEL: ..."
LOG_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \[", re.MULTILINE)


def skewed_nodes(
    site: TestSite,
    redis_url: str,
    env: dict[str, str],
    tmp_path: Path,
    report: Path,
) -> list[subprocess.Popen[bytes]]:
    """One test-site node per entry of SKEWS, every site limited to LIMIT."""
    hook_dir = tmp_path / "skewed-clock"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
    pythonpath = os.pathsep.join(p for p in (str(hook_dir), os.environ.get("PYTHONPATH")) if p)
    envs = [
        {"PYTHONPATH": pythonpath, SKEW_VAR: str(skew), REPORT_VAR: str(report)} for skew in SKEWS
    ]
    # What this test is about is a clock error of seconds to an hour; the tens of ms a
    # loaded machine adds to a request on its way (a node's first request to a host
    # reaches it 15-50 ms after its slot here, the next ones on time) are
    # test_limits.py's: a wider margin than limited_nodes' 0.1 (slots 600 ms apart,
    # not 550) keeps them apart. The limit is still checked exactly.
    margin = {"CRAWLFLEET_RATE_LIMIT_MARGIN": MARGIN}
    return limited_nodes(
        len(SKEWS),
        "skewed",
        LIMIT,
        site,
        redis_url,
        env,
        tmp_path,
        per_node=[margin] * len(SKEWS),
        per_node_env=envs,
    )


def redis_ms(client: redis.Redis) -> int:
    """Now on the Redis server's clock, in ms (as the lease script reads it)."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def log_times(log: Path) -> list[float]:
    """The time (epoch seconds) of every Scrapy log line of *log*, in local time."""
    text = log.read_text(errors="replace")
    return [datetime.strptime(s, "%Y-%m-%d %H:%M:%S").timestamp() for s in LOG_STAMP.findall(text)]


@pytest.mark.slow
@pytest.mark.timing
def test_nodes_with_skewed_clocks_keep_a_site_under_its_limit(
    redis_server_url: str,
    node_env: dict[str, str],
    key_prefix: str,
    sync_redis: redis.Redis,
    tmp_path: Path,
) -> None:
    report = tmp_path / "clocks.jsonl"
    with TestSite(SiteModel(pages=30, hosts=2, problems=False)) as site:
        began, began_on_redis = time.time(), redis_ms(sync_redis)
        procs = skewed_nodes(site, redis_server_url, node_env, tmp_path, report)
        codes = wait_all(procs, 60)
        ended, ended_on_redis = time.time(), redis_ms(sync_redis)
        stats = site.stats()
    for p in procs:  # only after a failed wait: do not leave nodes behind
        if p.poll() is None:
            p.kill()
            p.wait()
    logs = [tmp_path / f"node{i}.log" for i in range(len(SKEWS))]
    assert codes == [0] * len(SKEWS), "\n".join(
        f"--- node{i} (skew {s:+} s): exit {c}\n{log.read_text()[-2000:]}"
        for i, (s, c, log) in enumerate(zip(SKEWS, codes, logs, strict=True))
    )

    # the skew was really in force in each node process...
    lines = report.read_text().splitlines() if report.exists() else []
    applied = {r["pid"]: r["skew"] for r in map(json.loads, lines)}
    assert {p.pid: applied.get(p.pid) for p in procs} == {
        p.pid: s for p, s in zip(procs, SKEWS, strict=True)
    }
    # ... and is the time the node's own code saw (its log stamps, to the second)
    for skew, log in zip(SKEWS, logs, strict=True):
        stamps = log_times(log)
        assert len(stamps) >= 5, log.read_text()[-2000:]
        low, high = began + skew - 1, ended + skew + 1
        assert all(low <= t <= high for t in stamps), (
            f"{log.name} (skew {skew:+} s): log times {min(stamps) - began:+.0f} s to "
            f"{max(stamps) - began:+.0f} s from the start, expected {skew - 1:+.0f} s to "
            f"{ended - began + skew + 1:+.0f} s"
        )

    # ... and yet the crawl is complete, exactly once, and within the limit on every host
    assert stats["never_fetched"] == [] and stats["fetched_twice"] == []
    assert len(stats["hosts"]) == 2
    for host, figures in stats["hosts"].items():
        assert figures["max_rate_1s"] <= 2, f"{host}: {figures}"
    # each site's pace (its last slot granted, in µs) is on the Redis
    # clock: no node's skewed time found its way into it (the slack leaves room for a
    # longer interval than LIMIT's, e.g. a back-off, and is still far from an hour)
    raw: dict[bytes, bytes] = sync_redis.hgetall(JobKeys.of(key_prefix, "skewed").fleet.pace)  # type: ignore[assignment]
    pace = {name.decode(): int(us) // 1000 - began_on_redis for name, us in raw.items()}
    latest = ended_on_redis - began_on_redis + PACE_SLACK_MS
    assert len(pace) >= len(stats["hosts"]) and all(0 < ms <= latest for ms in pace.values()), (
        f"pace times (ms after the start, Redis clock): {pace}"
    )
