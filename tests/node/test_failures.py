"""The error registry end to end: a real node crawls a loopback site where pages fail;
every request that failed for good is in the state DB with its reason (an error status
after retries, a callback's exception with its stack), ``crawlfleet errors`` lists,
counts and exports them, and a re-crawl sends them again: the one that now succeeds is
resolved, the one that fails again is open with one more failure."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from crawlfleet.node.launcher import start_node
from crawlfleet.state.db import StateDB
from crawlfleet.state.errors import Failure, error_stats, list_errors, record_failures
from crawlfleet.state.models import utcnow
from tests.support.failing_site import FailingSite
from tests.support.loopback import LoopbackSite

ROOT = Path(__file__).resolve().parents[2]
SPIDER = "tests.support.failing_site:FailingSpider"
JOB = "failing"


def errors_cli(
    *args: str, db: str, env: dict[str, str], redis_url: str
) -> subprocess.CompletedProcess[str]:
    extra = ["--redis-url", redis_url] if args[0] == "recrawl" else []
    return subprocess.run(
        [
            *(sys.executable, "-m", "crawlfleet.cli.main", "errors", *args, "--db", db),
            *extra,
            *("-s", f"CRAWLFLEET_KEY_PREFIX={env['CRAWLFLEET_KEY_PREFIX']}"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )


def crawl(
    site: LoopbackSite,
    redis_url: str,
    node_env: dict[str, str],
    tmp_path: Path,
    db: str,
    n: int,
    **settings: Any,
) -> None:
    node = start_node(
        SPIDER,
        job=JOB,
        redis_url=redis_url,
        log=tmp_path / f"node{n}.log",
        spider_args={"start_urls": site.url},
        settings={
            **node_env,
            "CRAWLFLEET_STATE_DB_URL": db,
            "RETRY_TIMES": 1,
            "CRAWLFLEET_HEARTBEAT_SECONDS": 0.3,
            "CRAWLFLEET_FINISH_GRACE_SECONDS": 1,
            "ROBOTSTXT_OBEY": False,
            **settings,
        },
        cwd=ROOT,
    )
    assert node.wait(90) == 0, (tmp_path / f"node{n}.log").read_text()[-3000:]


@pytest.mark.slow
def test_failures_are_registered_listed_and_recrawled(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    db_url = f"sqlite:///{tmp_path / 'state.sqlite3'}"
    with FailingSite() as site:
        crawl(site, redis_server_url, node_env, tmp_path, db_url, 1)
        db = StateDB.open(db_url)
        try:
            found = {e["url"].rsplit("/", 1)[1]: e for e in list_errors(db, JOB)}
            assert set(found) == {"flaky", "missing", "boom"}
            assert (found["flaky"]["reason"], found["flaky"]["detail"]) == ("http", "HTTP 503")
            assert found["flaky"]["attempts"] == 2 and site.hits["/flaky"] == 2  # retried once
            assert (found["missing"]["http_status"], found["missing"]["attempts"]) == (404, 1)
            assert found["boom"]["reason"] == "parse"
            assert found["boom"]["detail"] == "ValueError: cannot parse this page"
            assert all(e["failures"] == 1 and e["state"] == "open" for e in found.values())
            stack = list_errors(db, JOB, reason="parse", stack=True)[0]["stack"]
            assert "ValueError: cannot parse this page" in stack and "failing_site.py" in stack

            listed = errors_cli("list", JOB, db=db_url, env=node_env, redis_url=redis_server_url)
            assert listed.returncode == 0, listed.stderr
            lines = listed.stdout.splitlines()
            assert len(lines) == 3 and all(
                line.split("\t")[3].startswith(site.url) for line in lines
            )
            stats = errors_cli("stats", JOB, db=db_url, env=node_env, redis_url=redis_server_url)
            assert "3 failed request(s)" in stats.stdout and "open, http" in stats.stdout

            # the site mends /flaky; re-crawl the HTTP failures only
            site.flaky_fixed.set()
            again = errors_cli(
                "recrawl",
                JOB,
                "--reason",
                "http",
                db=db_url,
                env=node_env,
                redis_url=redis_server_url,
            )
            assert again.returncode == 0, again.stderr
            assert "2 failed request(s) queued again" in again.stderr
            assert error_stats(db, JOB)["by_state"] == {"open": 1, "queued": 2, "resolved": 0}
            crawl(site, redis_server_url, node_env, tmp_path, db_url, 2)
            found = {e["url"].rsplit("/", 1)[1]: e for e in list_errors(db, JOB, state=None)}
            assert found["flaky"]["state"] == "resolved" and found["flaky"]["recrawls"] == 1
            assert (found["missing"]["state"], found["missing"]["failures"]) == ("open", 2)
            assert (found["boom"]["state"], found["boom"]["recrawls"]) == ("open", 0)
            assert site.hits["/ok"] == 1  # only what was re-crawled was fetched again

            out = tmp_path / "errors.jsonl"
            exported = errors_cli(
                "export",
                JOB,
                "--state",
                "all",
                "-o",
                str(out),
                db=db_url,
                env=node_env,
                redis_url=redis_server_url,
            )
            assert exported.returncode == 0, exported.stderr
            rows = [json.loads(line) for line in out.read_text().splitlines()]
            assert len(rows) == 3 and {r["job"] for r in rows} == {JOB}
            assert next(r for r in rows if r["reason"] == "parse")["stack"]
        finally:
            db.close()


@pytest.mark.slow
def test_a_recrawl_waited_for_says_how_far_the_nodes_got(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    """``errors recrawl --wait``: with no node running the failures wait, and it says
    so; a node then fetches them, and the command ends with the tally."""
    db_url = f"sqlite:///{tmp_path / 'state.sqlite3'}"
    with FailingSite() as site:
        crawl(site, redis_server_url, node_env, tmp_path, db_url, 1)  # 3 failures
        waiting = subprocess.Popen(
            [
                *(sys.executable, "-m", "crawlfleet.cli.main", "errors", "recrawl", JOB),
                *("--wait", "--db", db_url, "--redis-url", redis_server_url),
                *("-s", f"CRAWLFLEET_KEY_PREFIX={node_env['CRAWLFLEET_KEY_PREFIX']}"),
                *("-s", "CRAWLFLEET_PROGRESS_SECONDS=1"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
        )
        said: list[str] = []
        reader = threading.Thread(target=lambda: said.extend(waiting.stderr or ()), daemon=True)
        reader.start()
        try:
            # no node: nothing is fetched, and the command says so (however long a loaded
            # machine takes to start it) before a node starts
            deadline = time.monotonic() + 30
            while not any(line.startswith("no node of job") for line in said):
                assert waiting.poll() is None and time.monotonic() < deadline, said
                time.sleep(0.05)
            site.flaky_fixed.set()
            crawl(site, redis_server_url, node_env, tmp_path, db_url, 2)
            waiting.wait(timeout=30)
            reader.join(10)
            out = waiting.stdout.read() if waiting.stdout else ""
        finally:
            if waiting.poll() is None:
                waiting.kill()
                waiting.wait(10)
    err = "".join(said)
    assert waiting.returncode == 0, err
    lines = err.splitlines()
    assert lines[0] == f"job {JOB}: 3 failed request(s) queued again", err
    assert lines[1].startswith(
        "Re-crawl round 1: 0 of 3 failure(s) re-fetched, 0 fixed, 0 failed again, 3 waiting"
    ), err
    assert lines[2].startswith(f"no node of job {JOB} is running"), err
    assert lines.count(lines[2]) == 1  # said once
    assert re.fullmatch(
        r"Re-crawl round 1 done in \d+s: 3 of 3 failure\(s\) re-fetched, 1 fixed, "
        r"2 failed again",
        lines[-1],
    ), err
    assert out == ""


def test_errors_commands_say_what_is_wrong_in_one_line(tmp_path: Path) -> None:
    env = {"CRAWLFLEET_KEY_PREFIX": "cfterr"}
    bad = errors_cli("list", "job", db="nonsense://", env=env, redis_url="")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    empty = errors_cli("list", "job", db=f"sqlite:///{tmp_path / 's.db'}", env=env, redis_url="")
    assert empty.returncode == 0 and empty.stdout == "" and "no open failure" in empty.stderr
    wrong = errors_cli("list", "job", "--reason", "nope", db="sqlite://", env=env, redis_url="")
    assert wrong.returncode == 2 and "invalid choice" in wrong.stderr


def test_a_recrawl_with_redis_unreachable_leaves_failures_open(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'state.sqlite3'}"
    db = StateDB.open(db_url)
    db.upgrade()
    try:
        record_failures(
            db,
            [
                Failure(
                    JOB,
                    "ab" * 20,
                    "http://127.0.0.1:9/x",
                    "127.0.0.1",
                    "http",
                    "HTTP 500",
                    "n",
                    utcnow(),
                )
            ],
        )
        env = {"CRAWLFLEET_KEY_PREFIX": "cfterr"}
        r = errors_cli("recrawl", JOB, db=db_url, env=env, redis_url="redis://:pw@127.0.0.1:1/0")
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "unreachable" in r.stderr and ":pw@" not in r.stderr
        (row,) = list_errors(db, JOB)
        assert (row["state"], row["recrawls"]) == ("open", 0)
    finally:
        db.close()


@pytest.mark.slow
def test_a_retry_waits_in_the_frontier_and_its_wait_doubles(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    db_url = f"sqlite:///{tmp_path / 'state.sqlite3'}"
    with FailingSite() as site:
        crawl(
            site,
            redis_server_url,
            node_env,
            tmp_path,
            db_url,
            1,
            RETRY_TIMES=2,
            CRAWLFLEET_RETRY_BACKOFF=0.5,
            CRAWLFLEET_BACKOFF_STATUSES=[],  # the site's own back-off would space them too
        )
        times = site.times["/flaky"]
        assert len(times) == 3  # the first attempt and two retries
        first, second = times[1] - times[0], times[2] - times[1]
        assert 0.4 <= first < 2.0 and 0.8 <= second < 3.0, (first, second)
        log = (tmp_path / "node1.log").read_text()
        assert "'crawlfleet/scheduler/delayed': 2" in log
        assert "'crawlfleet/frontier/retries_due': 2" in log
        db = StateDB.open(db_url)
        try:
            flaky = next(e for e in list_errors(db, JOB) if e["url"].endswith("/flaky"))
            assert flaky["attempts"] == 3
        finally:
            db.close()


@pytest.mark.slow
def test_the_recrawl_phase_crawls_failures_again_before_the_job_ends(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    db_url = f"sqlite:///{tmp_path / 'state.sqlite3'}"
    with FailingSite() as site:

        def mend() -> None:  # /flaky works once its retry has failed too
            while len(site.times.get("/flaky", [])) < 2:
                time.sleep(0.05)
            site.flaky_fixed.set()

        threading.Thread(target=mend, daemon=True).start()
        crawl(site, redis_server_url, node_env, tmp_path, db_url, 1, CRAWLFLEET_RECRAWL_ROUNDS=1)
        db = StateDB.open(db_url)
        try:
            found = {e["url"].rsplit("/", 1)[1]: e for e in list_errors(db, JOB, state=None)}
            # /flaky failed (503 twice), was crawled again at the end and is resolved
            assert (found["flaky"]["state"], found["flaky"]["recrawls"]) == ("resolved", 1)
            # /missing failed again in its one round: open, counted twice, not again
            assert (found["missing"]["state"], found["missing"]["failures"]) == ("open", 2)
            assert found["missing"]["recrawls"] == 1
            # /boom (the spider's own error) is not a reason to re-crawl by default
            assert (found["boom"]["state"], found["boom"]["recrawls"]) == ("open", 0)
        finally:
            db.close()
        log = (tmp_path / "node1.log").read_text()
        assert "Re-crawl phase: 2 failed request(s) queued again" in log
        assert "Re-crawl phase: nothing left to re-crawl" in log
        assert "Re-crawl round" not in log  # a round shorter than 15 s says no progress


PROGRESS = re.compile(
    r"Re-crawl round 1/1(?: done in (\d+)s)?: (\d+) of 5 failure\(s\) re-fetched, "
    r"(\d+) fixed, (\d+) failed again(?:, (\d+) waiting(?: \((.*)\))?)?$",
    flags=re.M,
)


@pytest.mark.slow
def test_a_long_recrawl_round_says_how_far_it_got(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    """Four pages fail with 503 (the site is backed off for it, 0.6 s between
    requests), one with 404; re-crawled at that pace the round lasts about 3 s, and
    with CRAWLFLEET_PROGRESS_SECONDS = 1 the node says how far it got every second:
    counts that add up and grow, the site's back-off, then the round's tally."""
    pages = [f"/p/{i}" for i in range(4)]
    mended = threading.Event()

    def page(path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        if path == "/":
            links = "".join(f'<a href="{p}">{p}</a>' for p in [*pages, "/missing"])
            return 200, f"<html><body>{links}</body></html>".encode()
        if path == "/missing":
            return 404, b"<html>gone</html>"
        if not mended.is_set():
            if all(site.hits.get(p, 0) for p in pages):
                mended.set()  # every page failed once: they work from now on
            return 503, b"<html>busy</html>"
        return 200, b"<html>back</html>"

    db_url = f"sqlite:///{tmp_path / 'state.sqlite3'}"
    with LoopbackSite(page) as site:
        crawl(
            site,
            redis_server_url,
            node_env,
            tmp_path,
            db_url,
            1,
            RETRY_TIMES=0,
            CRAWLFLEET_RECRAWL_ROUNDS=1,
            CRAWLFLEET_PROGRESS_SECONDS=1,
            CRAWLFLEET_BACKOFF_START_SECONDS=0.6,
            CRAWLFLEET_BACKOFF_MAX_SECONDS=0.6,
            CRAWLFLEET_BACKOFF_HALF_LIFE_SECONDS=600,
        )
    log = (tmp_path / "node1.log").read_text()
    lines = PROGRESS.findall(log)
    assert len(lines) >= 2, log[-3000:]
    *during, (took, *last) = lines
    assert took and not any(done for done, *_ in during)
    # once nothing waits, the round only settles: no line until its tally
    assert all(waiting for *_, waiting, _why in during[:-1])
    assert [int(n) for n in last[:3]] == [5, 4, 1] and last[3] == ""  # nothing waits
    host = site.url.split("/")[2].split(":")[0]  # a site is its host
    seen = 0
    for _done, fetched, fixed, again, waiting, _why in during:
        assert int(fetched) == int(fixed) + int(again)
        assert int(fetched) + int(waiting or 0) == 5
        assert int(fetched) >= seen
        seen = int(fetched)
    waits = [why for *_, waiting, why in during if waiting]
    assert waits and all(re.fullmatch(rf"site {host} backing off 0\.\d s", w) for w in waits)
    assert log.index("Re-crawl round 1/1 done") < log.index("nothing left to re-crawl")


def test_a_failure_detail_is_one_readable_line() -> None:
    """Twisted's wrappers hold Failure objects: the registry says their classes and
    messages, never the objects' reprs."""
    from twisted.internet.error import ConnectionDone, ConnectionLost
    from twisted.python.failure import Failure
    from twisted.web._newclient import ResponseFailed, ResponseNeverReceived

    from crawlfleet.middlewares.failures import _one_line

    never = ResponseNeverReceived([Failure(ConnectionDone())])
    assert _one_line(never) == (
        "ResponseNeverReceived: ConnectionDone: Connection was closed cleanly."
    )
    failed = ResponseFailed([Failure(ConnectionLost("gone")), Failure(ValueError("bad\nline"))])
    detail = _one_line(failed)
    assert (
        detail.startswith("ResponseFailed: ConnectionLost: ") and "ValueError: bad line" in detail
    )
    assert "<twisted" not in detail and "\n" not in detail
    assert _one_line(TimeoutError()) == "TimeoutError"
