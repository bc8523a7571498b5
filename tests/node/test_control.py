"""Control commands through Redis: pause, resume, drain, stop and concurrency, sent with
``crawlfleet control`` to real node processes crawling the bundled test site."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from crawlfleet.fleet.control import send_command
from crawlfleet.frontier.control import Desired, desired
from crawlfleet.node.launcher import start_node, wait_all
from crawlfleet.node.steering import Steering
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import CLIENT_HEADER, TestSite
from tests.support.nodes import SPIDER, node_logs, nodes
from tests.support.paths import ROOT
from tests.support.waiting import wait_until

#: rates, send times and deadlines: ./dev.sh test runs these alone
pytestmark = pytest.mark.timing


def test_the_newest_command_of_each_kind_wins() -> None:
    def cmd(seq: int, value: Any) -> str:
        return json.dumps({"seq": seq, "value": value, "at": 0})

    d = desired({"*:state": cmd(3, "paused"), "n1:state": cmd(5, "running")})
    assert (d.state, d.state_seq) == ("running", 5)
    d = desired({"*:state": cmd(7, "draining"), "n1:state": cmd(5, "running")})
    assert d.state == "draining"
    d = desired({"*:concurrency": cmd(2, "4"), "n1:concurrency": None, "*:state": "garbage"})
    assert (d.state, d.concurrency, d.concurrency_seq) == ("running", 4, 2)


def test_steering_keeps_state_ceiling_and_feedback_apart() -> None:
    s = Steering(concurrency=8, prefetch=16)
    assert (s.concurrency, s.prefetch, s.state) == (8, 16, "running")
    assert s.take(Desired(state="paused", state_seq=1)) == (False, "paused")
    assert s.take(Desired(state="paused", state_seq=1)) == (False, None)  # nothing new
    # a concurrency command: the ceiling; the prefetch follows
    assert s.take(Desired("paused", 1, 4, 2)) == (True, None)
    assert (s.concurrency, s.prefetch) == (4, 8)
    # the feedback may run fewer, never more than the ceiling
    assert s.set_feedback(2) and (s.concurrency, s.prefetch) == (2, 4)
    assert s.set_feedback(6) and s.concurrency == 4
    assert not s.set_feedback(6)
    # resume, and the ceiling lifted (no concurrency command left): back to 8
    assert s.take(Desired("running", 3, None, 4)) == (True, "running")
    assert s.ceiling == 8 and s.concurrency == 6
    assert s.status()["control"] == {"state": 3, "concurrency": 4}


@pytest.fixture
def site() -> Iterator[TestSite]:
    with TestSite(SiteModel(pages=200, hosts=2, problems=False), latency_seconds=0.25) as s:
        yield s


def control(redis_url: str, prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *(sys.executable, "-m", "crawlfleet.cli.main", "control", *args),
            *("--redis-url", redis_url, "-s", f"CRAWLFLEET_KEY_PREFIX={prefix}"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def pause_now(redis_url: str, prefix: str, job: str) -> float:
    """Pause every node of *job* (as `crawlfleet control pause` does); the monotonic
    time just before the command was written."""

    async def send() -> float:
        client = make_client(redis_url)
        try:
            asked = time.monotonic()
            await send_command(client, prefix, job, "pause")
            return asked
        finally:
            await client.aclose()

    return asyncio.run(send())


def statuses(client: redis.Redis, keys: JobKeys) -> dict[str, dict[str, Any]]:
    raw: dict[bytes, bytes] = client.hgetall(keys.nodeinfo)  # type: ignore[assignment]
    return {k.decode(): json.loads(v) for k, v in raw.items()}


def crawling(
    job: str, site: TestSite, redis_url: str, node_env: dict[str, str], tmp_path: Path
) -> tuple[str, JobKeys, list[subprocess.Popen[bytes]]]:
    """Two nodes crawling *job*, once 20 pages are fetched: (key prefix, keys, nodes)."""
    prefix = node_env["CRAWLFLEET_KEY_PREFIX"]
    procs = nodes(2, site, redis_url, node_env, tmp_path, job)
    wait_until("crawl started", lambda: site.stats()["content_fetched"] >= 20)
    return prefix, JobKeys.of(prefix, job), procs


@pytest.mark.slow
def test_pause_resume_drain_and_concurrency(
    site: TestSite,
    redis_server_url: str,
    node_env: dict[str, str],
    sync_redis: redis.Redis,
    tmp_path: Path,
) -> None:
    prefix, keys, procs = crawling("steered", site, redis_server_url, node_env, tmp_path)

    # pause the job: both nodes acknowledge, hand back their leases, fetch nothing more
    r = control(redis_server_url, prefix, "pause", "steered")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("acknowledged (paused)") == 2, r.stdout
    wait_until("leases handed back", lambda: sync_redis.zcard(keys.leases) == 0, 10)
    frozen = site.stats()["total_requests"]
    time.sleep(2)
    assert site.stats()["total_requests"] == frozen
    assert {s["state"] for s in statuses(sync_redis, keys).values()} == {"paused"}
    assert all(p.poll() is None for p in procs), "a paused node must not close"

    # resume, and limit one node to two requests at a time
    assert control(redis_server_url, prefix, "resume", "steered").returncode == 0
    wait_until("crawl resumed", lambda: site.stats()["total_requests"] > frozen + 5)
    first, second = sorted(statuses(sync_redis, keys))
    r = control(redis_server_url, prefix, "concurrency", "2", "steered", "--node", first)
    assert r.returncode == 0 and "acknowledged (running)" in r.stdout, r.stdout + r.stderr
    info = statuses(sync_redis, keys)
    assert info[first]["concurrency"] == 2 and info[first]["prefetch"] == 2
    assert info[second]["concurrency"] == 4
    # every node registered who and where it is
    for node_info in info.values():
        assert node_info["ip"] == "127.0.0.1" and node_info["job"] == "steered"
        assert node_info["pid"] in {p.pid for p in procs} and node_info["version"]
    # the downloader runs no more than that (in_flight: the downloader's active set)
    time.sleep(0.5)
    seen = []
    for _ in range(8):
        seen.append(statuses(sync_redis, keys)[first]["in_flight"])
        time.sleep(0.2)
    assert max(seen) <= 2 and max(seen) > 0, seen

    # drain the other one: it finishes what it holds and closes; the first one goes on
    r = control(redis_server_url, prefix, "drain", "steered", "--node", second)
    assert r.returncode == 0, r.stdout + r.stderr
    codes = wait_all(procs, 90)
    assert codes == [0, 0], node_logs(tmp_path)[-3000:]
    text = node_logs(tmp_path)
    assert "Spider closed (drained)" in text and "Spider closed (finished)" in text
    stats = site.stats()
    assert stats["never_fetched"] == [] and stats["fetched_twice"] == []


@pytest.mark.slow
def test_stop_hands_everything_back_and_a_new_node_finishes_after_resume(
    site: TestSite,
    redis_server_url: str,
    node_env: dict[str, str],
    sync_redis: redis.Redis,
    tmp_path: Path,
) -> None:
    prefix, keys, procs = crawling("halted", site, redis_server_url, node_env, tmp_path)
    r = control(redis_server_url, prefix, "stop", "halted")
    assert r.returncode == 0, r.stdout + r.stderr
    assert wait_all(procs, 30) == [0, 0], node_logs(tmp_path)[-3000:]
    assert node_logs(tmp_path).count("Spider closed (stopped)") == 2
    assert sync_redis.zcard(keys.leases) == 0
    assert int(sync_redis.hget(keys.counters, "queued") or 0) > 0
    # the stop persists: a node started now stops at once ...
    late = nodes(1, site, redis_server_url, node_env, tmp_path, "halted")
    assert wait_all(late, 30) == [0]
    assert "running -> stopped (`crawlfleet control resume halted` lifts it)" in node_logs(tmp_path)
    # ... until the job is resumed; then a node finishes it, nothing lost
    assert control(redis_server_url, prefix, "resume", "halted", "--wait", "0").returncode == 0
    final = nodes(1, site, redis_server_url, node_env, tmp_path, "halted")
    assert wait_all(final, 90) == [0], node_logs(tmp_path)[-3000:]
    stats = site.stats()
    assert stats["never_fetched"] == []
    # pages in flight at the stop were handed back unfinished: they may be fetched again
    assert len(stats["fetched_twice"]) <= 8


def test_control_rejects_bad_input(redis_server_url: str, node_env: dict[str, str]) -> None:
    prefix = node_env["CRAWLFLEET_KEY_PREFIX"]
    r = control(redis_server_url, prefix, "concurrency", "zero", "somejob")
    assert r.returncode == 2 and "concurrency must be a whole number" in r.stderr
    r = control(redis_server_url, prefix, "pause")
    assert r.returncode == 2 and "name a JOB or give --all" in r.stderr
    r = control(redis_server_url, prefix, "pause", "job", "--node", "a:b")
    assert r.returncode == 2 and "is not valid" in r.stderr


@pytest.mark.slow
def test_pause_stops_new_requests_within_a_second(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    """With the default 2-s heartbeat, a pause is seen within CONTROL_CHECK_SECONDS: no
    request reaches the site later than a second after the command."""
    settings = {
        **node_env,
        "CONCURRENT_REQUESTS": 4,
        "LOG_LEVEL": "INFO",
        "DEFAULT_REQUEST_HEADERS": json.dumps({CLIENT_HEADER: "paused"}),
    }
    with TestSite(SiteModel(pages=300, hosts=2, problems=False), latency_seconds=0.05) as s:
        procs = [
            start_node(
                SPIDER,
                job="quick",
                redis_url=redis_server_url,
                log=tmp_path / f"node{i}.log",
                spider_args={"start_urls": ",".join(s.seed_urls)},
                settings=settings,
                cwd=ROOT,
            )
            for i in range(2)
        ]
        try:
            wait_until("crawl started", lambda: s.stats()["content_fetched"] >= 20)
            # written the way `crawlfleet control pause` writes it, timed from the write
            # (the command's own start-up, ~1 s on a slow machine, is not the node's delay)
            asked = pause_now(redis_server_url, node_env["CRAWLFLEET_KEY_PREFIX"], "quick")
            time.sleep(1.5)
            last = s.stats()["clients"]["paused"]["last"]  # the site's monotonic clock
            assert last - asked < 1.0, f"a request {last - asked:.2f} s after the pause"
            assert s.stats()["never_fetched"], "the crawl was over before the pause"
        finally:
            for p in procs:
                p.kill()
                p.wait(10)


@pytest.mark.slow
def test_a_node_started_before_the_first_seed_waits_for_it(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    prefix = node_env["CRAWLFLEET_KEY_PREFIX"]
    with TestSite(SiteModel(pages=10, hosts=1, problems=False)) as s:
        node = start_node(
            "crawlfleet.benchmark.polite:PageListSpider",  # no start requests of its own
            job="later",
            redis_url=redis_server_url,
            log=tmp_path / "node0.log",
            settings={**node_env, "LOG_LEVEL": "INFO"},
            cwd=ROOT,
        )
        try:
            wait_until("waiting said", lambda: "has no work yet" in node_logs(tmp_path), 30)
            time.sleep(1.5)  # many finish grace periods
            assert node.poll() is None, "a job that never had work is not finished"
            seeded = subprocess.run(
                [
                    *(sys.executable, "-m", "crawlfleet.cli.main", "seed", "later"),
                    *(s.seed_urls[0], "--redis-url", redis_server_url),
                    *("-s", f"CRAWLFLEET_KEY_PREFIX={prefix}"),
                ],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=ROOT,
            )
            assert seeded.returncode == 0, seeded.stderr
            assert wait_all([node], 30) == [0], node_logs(tmp_path)[-3000:]
            assert s.stats()["total_requests"] == 1
        finally:
            if node.poll() is None:
                node.kill()
    text = node_logs(tmp_path)
    line = (
        "Job 'later' has no work yet: waiting for seeds "
        "(in pagelist:start_urls or crawlfleet seed later URL...)"
    )
    assert line in text
    assert "Spider closed (finished)" in text
