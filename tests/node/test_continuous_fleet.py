"""Continuous crawls against the fleet's hard cases, end to end: real nodes
(``crawlfleet crawl``) revisiting small loopback sites.

- A restart of everything: every node and the Redis server (AOF, fsync always) killed at
  once, Redis restarted from its AOF, nodes started again: no tracked page lost, each
  page's due time kept, no page fetched twice within less than its interval.
- The budget: two jobs that want far more revisits than a site's fleet-wide limit
  allows never exceed it together, and both get revisits done.
- Idle between revisits: a job's nodes ask the site for its pages once an interval
  and Redis for a few commands a second, not more.

What the tests look at: the sites' own logs (arrival times per page, the highest rate in
any 1-s window), the jobs' counters, the revisit schedule in Redis
(:func:`~tests.support.revisits.waiting_revisits`).
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from crawlfleet.node.launcher import start_node
from crawlfleet.redis.localcluster import RedisProcess
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import CLIENT_HEADER, TestSite
from tests.support.loopback import LoopbackSite
from tests.support.nodes import SPIDER, node_logs
from tests.support.paths import ROOT
from tests.support.revisits import job_counters, revisit_settings, waiting_revisits

#: The small site's pages: a listing linking five products; all of them are tracked.
PAGES = ["/", "/p1", "/p2", "/p3", "/p4", "/p5"]


def page(path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    if path == "/":
        links = "".join(f'<a href="{p}">{p}</a>' for p in PAGES[1:])
        return 200, f"<html><body>{links}</body></html>".encode()
    if path in PAGES:
        return 200, (
            f'<html><div class="product"><h1 class="title">{path}</h1>'
            f'<span class="price">1</span><span class="sku">{path}</span>'
            '<time datetime="2026-01-01">2026-01-01</time></div></html>'
        ).encode()
    return 404, b""


@pytest.fixture
def site() -> Iterator[LoopbackSite]:
    with LoopbackSite(page) as loopback:
        yield loopback


def start(
    n: int,
    job: str,
    seeds: str,
    redis_url: str,
    settings: dict[str, Any],
    tmp_path: Path,
) -> list[subprocess.Popen[bytes]]:
    """*n* nodes of *job* from *seeds*, logging to ``node<k>.log`` in *tmp_path*
    (numbered after those already there)."""
    first = len(list(tmp_path.glob("node*.log")))
    return [
        start_node(
            SPIDER,
            job=job,
            redis_url=redis_url,
            log=tmp_path / f"node{first + i}.log",
            spider_args={"start_urls": seeds},
            settings=settings,
            cwd=ROOT,
        )
        for i in range(n)
    ]


def wait_for(
    what: str,
    check: Callable[[], bool],
    procs: list[subprocess.Popen[bytes]],
    tmp_path: Path,
    seconds: float,
) -> None:
    """Poll *check* until it holds; fail (with the nodes' logs) when a node exits or
    *seconds* pass."""
    deadline = time.monotonic() + seconds
    while not check():
        assert all(p.poll() is None for p in procs), node_logs(tmp_path)[-4000:]
        assert time.monotonic() < deadline, (
            f"timed out waiting: {what}\n" + (node_logs(tmp_path)[-4000:])
        )
        time.sleep(0.1)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop the nodes still running (SIGINT; kill -9 after 20 s)."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    deadline = time.monotonic() + 20
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def signal_all(procs: list[subprocess.Popen[bytes]], how: signal.Signals) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(how)


@pytest.mark.slow
def test_a_restart_of_every_node_and_redis_keeps_every_tracked_page_and_its_schedule(
    site: LoopbackSite, node_env: dict[str, str], key_prefix: str, tmp_path: Path
) -> None:
    interval, job = 2.0, "durable"
    redis = RedisProcess(tmp_path / "redis", persist=True)  # AOF, fsync always
    redis.start()
    settings = revisit_settings(node_env, interval)
    procs = start(2, job, site.url, redis.url, settings, tmp_path)
    try:
        wait_for(
            "every page tracked and revisited",
            lambda: (
                all(site.hits.get(p, 0) >= 2 for p in PAGES)
                and job_counters(redis.url, key_prefix, job).get("tracked") == len(PAGES)
            ),
            procs,
            tmp_path,
            40,
        )
        # the moment of the kill: nodes frozen while every page waits for its next
        # visit (none in flight), so that what Redis holds can be read first
        deadline = time.monotonic() + 15
        while True:
            signal_all(procs, signal.SIGSTOP)
            schedule = waiting_revisits(redis.url, key_prefix, job)
            if len(schedule) == len(PAGES) or time.monotonic() > deadline:
                break
            signal_all(procs, signal.SIGCONT)
            time.sleep(0.05 + 0.1 * (time.monotonic() % 1))
        counters = job_counters(redis.url, key_prefix, job)
        fetched = {p: site.hits[p] for p in PAGES}
        signal_all(procs, signal.SIGKILL)
        redis.kill()
        for p in procs:
            p.wait(10)
    finally:
        signal_all(procs, signal.SIGKILL)
    assert sorted(schedule) == sorted(site.url.rstrip("/") + p for p in PAGES), schedule

    # Redis back from its AOF: every page still waits, with the same due time
    redis.start()
    try:
        assert waiting_revisits(redis.url, key_prefix, job) == schedule
        after = job_counters(redis.url, key_prefix, job)
        assert after == counters and after["tracked"] == len(PAGES), (counters, after)

        procs = start(2, job, site.url, redis.url, settings, tmp_path)
        try:
            wait_for(
                "every page revisited twice after the restart",
                lambda: all(site.hits[p] >= fetched[p] + 2 for p in PAGES),
                procs,
                tmp_path,
                40,
            )
        finally:
            stop(procs)
        after = job_counters(redis.url, key_prefix, job)
    finally:
        redis.stop()
    assert after["tracked"] == len(PAGES), after
    assert after.get("queued", 0) + after.get("leased", 0) == len(PAGES), after

    # schedules kept: no page fetched before the due time it had at the kill, and none
    # twice within less than its interval (the site's own clock: arrival times)
    wall = time.time() - time.monotonic()  # the site's monotonic clock -> epoch seconds
    late: list[float] = []
    gaps: list[float] = []
    for path in PAGES:
        times = site.times[path]
        due = schedule[site.url.rstrip("/") + path] / 1000
        late.append(times[fetched[path]] + wall - due)
        assert late[-1] >= -0.05, (path, late[-1])
        gaps += [b - a for a, b in itertools.pairwise(times)]
    print(
        f"\nrestart: {len(schedule)} pages waiting at the kill, fetched after it "
        f"{min(late):.2f} to {max(late):.2f} s after their due times; "
        f"{len(gaps)} revisits, at least {min(gaps):.2f} s apart (interval {interval} s)"
    )
    assert min(gaps) >= interval - 0.1, gaps
    assert set(site.hits) == set(PAGES), site.hits
    text = node_logs(tmp_path)
    assert "Traceback" not in text, text[-4000:]


#: The budget test's site: 7 pages (a home page, a catalogue page, 5 products).
BUDGET_SITE = SiteModel(pages=6, hosts=1, problems=False)


@pytest.mark.slow
@pytest.mark.timing
def test_two_continuous_jobs_revisiting_one_site_keep_its_fleet_wide_budget(
    redis_server_url: str, node_env: dict[str, str], key_prefix: str, tmp_path: Path
) -> None:
    """Each job wants its 7 pages every 0.5 s (14 requests a second); together they get
    4 a second: never more in any 1-s window, and both get their revisits."""
    budget, jobs = 4, {"a": 2, "b": 1}  # job -> its nodes
    common = {
        **revisit_settings(node_env, 0.5),
        "CRAWLFLEET_RATE_LIMITS": json.dumps({"*": f"{budget}/1s"}),
        # sends on a busy machine can be tens of ms late: the margin of the tests'
        # limited nodes (tests/support/nodes.py), still checked exactly
        "CRAWLFLEET_RATE_LIMIT_MARGIN": 0.1,
    }
    with TestSite(BUDGET_SITE) as site:
        pages = len(site.expected_urls())
        seeds = ",".join(site.seed_urls)
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for job, n in jobs.items():
                label = {"DEFAULT_REQUEST_HEADERS": json.dumps({CLIENT_HEADER: job})}
                procs += start(n, job, seeds, redis_server_url, {**common, **label}, tmp_path)
            wait_for(
                "both jobs revisiting every page",
                lambda: all(
                    c.get("requests", 0) >= 2 * pages
                    for c in (site.stats()["clients"].get(job, {}) for job in jobs)
                ),
                procs,
                tmp_path,
                60,
            )
            stats = site.stats()
        finally:
            stop(procs)
    host = stats["hosts"]["127.0.0.1"]
    rate = (host["requests"] - 1) / stats["active_seconds"]
    print(
        f"\n2 jobs, 3 nodes, {budget}/1s: {host['requests']} requests in "
        f"{stats['active_seconds']:.2f} s = {rate:.2f}/s, at most {host['max_rate_1s']} "
        f"in any 1-s window; per job: "
        + ", ".join(f"{k} {c['requests']}" for k, c in stats["clients"].items())
    )
    assert host["max_rate_1s"] <= budget, stats["clients"]
    assert rate >= budget / 2, rate  # wanted far more: the budget is used, not wasted
    for job in jobs:
        assert job_counters(redis_server_url, key_prefix, job)["tracked"] == pages
        assert stats["clients"][job]["requests"] >= 2 * pages, stats["clients"]
    text = node_logs(tmp_path)
    assert "Traceback" not in text, text[-4000:]


def client_commands(redis: RedisProcess, seconds: float) -> Counter[str]:
    """The commands *redis*'s clients send it in the next *seconds* (by name; those a
    script runs are not counted), watched with MONITOR."""
    seen: Counter[str] = Counter()
    client = redis.client()
    try:
        with client.monitor() as monitor:
            ends = time.monotonic() + seconds
            while time.monotonic() < ends:
                command = monitor.next_command()
                if command["client_type"] != "lua":
                    seen[command["command"].split(" ", 1)[0].lower()] += 1
    finally:
        client.close()
    return seen


@pytest.mark.slow
@pytest.mark.timing
def test_an_idle_continuous_job_asks_the_site_once_an_interval_and_redis_little(
    site: LoopbackSite, node_env: dict[str, str], key_prefix: str, tmp_path: Path
) -> None:
    """Between revisits a job's nodes wait: the site sees each page once an interval, on
    time (with the production default of reclaims, every 5 s, longer than the interval),
    its Redis (one of the test's own, nothing else on it) a few commands a second."""
    interval, window, job = 2.0, 8.0, "idle"
    redis = RedisProcess(tmp_path / "redis", persist=False)
    redis.start()
    settings = {  # the production defaults of heartbeats and reclaims
        **revisit_settings(node_env, interval),
        "CRAWLFLEET_HEARTBEAT_SECONDS": 2,
        "CRAWLFLEET_NODE_TIMEOUT_SECONDS": 10,
        "CRAWLFLEET_RECLAIM_SECONDS": 5,
    }
    procs = start(2, job, site.url, redis.url, settings, tmp_path)
    try:
        wait_for(
            "every page revisited",
            lambda: all(site.hits.get(p, 0) >= 2 for p in PAGES),
            procs,
            tmp_path,
            40,
        )
        began = time.monotonic()
        commands = client_commands(redis, window)
        ended = time.monotonic()
    finally:
        stop(procs)
        redis.stop()
    fetches = sum(began <= t < ended for p in PAGES for t in site.times[p])
    per_page = (ended - began) / interval
    total = sum(commands.values())
    print(
        f"\nidle: {fetches} fetches of {len(PAGES)} pages in {ended - began:.1f} s (interval "
        f"{interval} s); {total / window:.1f} Redis commands a second from 2 nodes: "
        + ", ".join(f"{name} {n}" for name, n in commands.most_common())
    )
    # each page once an interval: never sooner, never much later
    gaps = {p: [b - a for a, b in itertools.pairwise(site.times[p])] for p in PAGES}
    assert all(interval - 0.1 <= g <= interval + 1 for p in PAGES for g in gaps[p]), gaps
    assert fetches <= len(PAGES) * (per_page + 1)
    assert total / window < 25, commands
