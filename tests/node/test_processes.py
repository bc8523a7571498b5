"""``crawlfleet crawl --processes N``: N nodes of one job forked from one command, once
Scrapy and the spider's parts are imported. Each is a node as if started alone (its own
node id, leases, feed and stats files); the command waits for them all, hands a stop on
to each once, and its exit status is the worst of theirs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from scrapy import Spider
from scrapy.settings import Settings

from crawlfleet.benchmark.crawl import kill_left
from crawlfleet.cli.crawl import own_settings
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.node.launcher import MAX_PROCESSES, numbered, start_node, wait_all
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from tests.redis.test_embedded_stop import kill_if_left, running
from tests.redis.test_watchdog import pid_of
from tests.support.loopback import LoopbackSite
from tests.support.paths import ROOT
from tests.support.waiting import poll

SPIDER = "crawlfleet.benchmark.linkspider:LinkSpider"
PAGES = 40


def test_numbered_puts_the_process_before_the_suffix() -> None:
    assert numbered("items.jsonl", 2) == "items.2.jsonl"
    assert numbered("out/items.csv", 1) == "out/items.1.csv"
    assert numbered("file:///tmp/a.b/items.jl", 3) == "file:///tmp/a.b/items.3.jl"
    assert numbered("a.b/items", 4) == "a.b/items.4"  # no suffix: the number last
    assert numbered(".hidden", 2) == ".hidden.2"


class FeedSpider(Spider):
    name = "feeds"
    custom_settings = {"FEEDS": {"spider.csv": {"format": "csv"}}}  # noqa: RUF012


class FormatSpider(Spider):
    name = "format"
    custom_settings = {"LOG_FORMAT": "%(levelname)s %(message)s"}  # noqa: RUF012


def test_each_process_writes_its_own_settings() -> None:
    settings = Settings({"CRAWLFLEET_STATS_FILE": "stats.json"})
    settings.set("FEEDS", {"items.jsonl": {"format": "jsonlines"}}, priority="cmdline")
    probe = settings.copy()
    probe.set(
        "FEEDS",
        {
            "items.jsonl": {"format": "jsonlines"},
            "s3://bucket/items.jl": {"format": "jsonlines"},
            "file:///tmp/all.xml": {"format": "xml"},
            "stdout:": {"format": "jsonlines"},
        },
        priority="cmdline",
    )
    own = own_settings(settings, probe, 2)
    assert own.getdict("FEEDS") == {
        "items.2.jsonl": {"format": "jsonlines"},
        "s3://bucket/items.2.jl": {"format": "jsonlines"},  # an object of its own too
        "file:///tmp/all.2.xml": {"format": "xml"},
        "stdout:": {"format": "jsonlines"},  # the one stdout all share
    }
    assert own.get("CRAWLFLEET_STATS_FILE") == "stats.2.json"
    assert settings.get("CRAWLFLEET_STATS_FILE") == "stats.json"  # the command's own: kept
    assert own.getpriority("LOG_FILE_APPEND") == 0  # no LOG_FILE: left at its default
    # its log lines say which node wrote them; a format of the user's own is theirs
    assert own.get("LOG_FORMAT") == "%(asctime)s [node 2] [%(name)s] %(levelname)s: %(message)s"
    assert settings.get("LOG_FORMAT") == "%(asctime)s [%(name)s] %(levelname)s: %(message)s"
    mine = Settings({"LOG_FORMAT": "%(process)d %(message)s"})
    assert own_settings(mine, mine.copy(), 2).get("LOG_FORMAT") == "%(process)d %(message)s"
    assert own.get("JOBDIR") is None  # none set, none made up
    # the spider's state of each node in a directory of its own, under the one given
    kept = Settings({"JOBDIR": "crawls/books"})
    assert own_settings(kept, kept.copy(), 2).get("JOBDIR") == os.path.join(
        "crawls/books", "node-2"
    )
    logged = Settings({"LOG_FILE": "crawl.log", "LOG_FILE_APPEND": False})
    assert own_settings(logged, logged.copy(), 2).getbool("LOG_FILE_APPEND")  # shared
    # a spider's own format wins once its crawler applies it; Scrapy's first lines,
    # logged before that, are numbered
    plain = Settings()
    probe = plain.copy()
    FormatSpider.update_settings(probe)
    own = own_settings(plain, probe, 2)
    assert own.get("LOG_FORMAT").startswith("%(asctime)s [node 2] ")
    FormatSpider.update_settings(own)
    assert own.get("LOG_FORMAT") == "%(levelname)s %(message)s"
    bare = Settings()
    bare.set("LOG_FORMAT", "%(message)s", priority="default")
    assert own_settings(bare, bare.copy(), 3).get("LOG_FORMAT") == "[node 3] %(message)s"

    # a spider's own FEEDS (in the probe, as check_settings builds it) are numbered too,
    # and win over the spider's custom_settings
    plain = Settings({"FEEDS": {"project.jsonl": {"format": "jsonlines"}}})
    probe = plain.copy()
    FeedSpider.update_settings(probe)
    own = own_settings(plain, probe, 1)
    FeedSpider.update_settings(own)
    assert own.getdict("FEEDS") == {"spider.1.csv": {"format": "csv"}}


def chain(path: str, _headers: dict[str, str]) -> tuple[int, bytes]:
    """/p/N links to /p/N+1 and /p/N+2, up to PAGES."""
    n = int(path.rpartition("/")[2] or 0)
    links = "".join(f'<a href="/p/{m}">{m}</a>' for m in (n + 1, n + 2) if m <= PAGES)
    return 200, f"<html><body>{links}</body></html>".encode()


def slow_endless(path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """Every page takes 0.2 s and links to three new ones."""
    time.sleep(0.2)
    n = int(path.rpartition("/")[2] or 0)
    links = "".join(f'<a href="/p/{3 * n + k}">{k}</a>' for k in (1, 2, 3))
    return 200, f"<html><body>{links}</body></html>".encode()


def command(
    site: LoopbackSite,
    job: str,
    redis_url: str,
    node_env: dict[str, str],
    tmp_path: Path,
    processes: int,
    **settings: object,
) -> subprocess.Popen[bytes]:
    return start_node(
        SPIDER,
        job=job,
        redis_url=redis_url,
        log=tmp_path / "nodes.log",
        spider_args={"start_urls": site.url},
        settings={
            **node_env,
            "CONCURRENT_REQUESTS": 2,
            "LOG_LEVEL": "INFO",
            "CRAWLFLEET_ITEM_STAGES": "",
            "CRAWLFLEET_HEARTBEAT_SECONDS": 0.3,
            "CRAWLFLEET_STATS_FILE": str(tmp_path / "stats.json"),
            **settings,
        },
        output=tmp_path / "items.jsonl",
        processes=processes,
        cwd=ROOT,
    )


def urls(paths: list[Path]) -> list[str]:
    return [
        json.loads(line)["url"]
        for path in paths
        if path.exists()
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def test_the_nodes_of_one_command_crawl_the_site_once(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    with LoopbackSite(chain) as site:
        proc = command(site, "forked", redis_server_url, node_env, tmp_path, 2)
        codes = wait_all([proc], 120)
        hits = dict(site.hits)
    log = (tmp_path / "nodes.log").read_text()
    assert codes == [0], log[-3000:]
    pages = {"/", *(f"/p/{n}" for n in range(1, PAGES + 1))}
    assert hits == dict.fromkeys(pages, 1)  # every page, none twice
    files = [tmp_path / "items.1.jsonl", tmp_path / "items.2.jsonl"]
    found = urls(files)
    assert sorted(found) == sorted(site.url.rstrip("/") + p for p in pages)
    assert not (tmp_path / "items.jsonl").exists()
    stats = [json.loads((tmp_path / f"stats.{i}.json").read_text()) for i in (1, 2)]
    assert [s["finish_reason"] for s in stats] == ["finished", "finished"]
    # two nodes, each with its own id, and each line of the shared log says which
    closed = re.findall(r"\[node (\d)\] .*crawlfleet node (\S+) closed \(finished\)", log)
    assert sorted(n for n, _id in closed) == ["1", "2"], log[-3000:]
    assert len({node_id for _n, node_id in closed}) == 2


def test_a_log_file_not_appended_to_is_emptied_once_for_all_nodes(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    log_file = tmp_path / "crawl.log"
    log_file.write_text("a line of the last run\n")
    with LoopbackSite(chain) as site:
        proc = command(
            site, "fresh-log", redis_server_url, node_env, tmp_path, 2,
            LOG_FILE=str(log_file), LOG_FILE_APPEND=False,
        )  # fmt: skip
        codes = wait_all([proc], 120)
    text = log_file.read_text()
    assert codes == [0], (tmp_path / "nodes.log").read_text()[-3000:]
    assert "a line of the last run" not in text
    # neither node emptied it under the other: both started and closed in it
    for n in (1, 2):
        assert f"[node {n}] [scrapy.utils.log] INFO: Scrapy" in text, text[-3000:]
        assert re.search(rf"\[node {n}\] .*closed \(finished\)", text), text[-3000:]


def leased(redis_url: str, prefix: str, job: str) -> int:
    async def read() -> int:
        client = make_client(redis_url)
        try:
            return (await JobFrontier(client, JobKeys.of(prefix, job)).sizes())["leased"]
        finally:
            await client.aclose()

    return asyncio.run(read())


def started(site: LoopbackSite, proc: subprocess.Popen[bytes], log: Path, pages: int) -> None:
    """Both nodes are crawling (each opened its spider) and the site saw *pages*."""
    deadline = time.monotonic() + 60
    while sum(site.hits.values()) < pages or log.read_text().count("Spider opened") < 2:
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)


def nodes(proc: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """The nodes of *proc* (the embedded Redis and its watchdog, if it started them, aside)."""
    return [
        c
        for c in psutil.Process(proc.pid).children()
        if c.name() != "redis-server" and "crawlfleet.redis.watchdog" not in c.cmdline()
    ]


def signalled(
    site: LoopbackSite, proc: subprocess.Popen[bytes], log: Path, how: signal.Signals
) -> tuple[int, list[psutil.Process]]:
    """Once both nodes of *proc* crawl, send it *how*: its exit status, and its nodes."""
    try:
        started(site, proc, log, 6)
        children = nodes(proc)
        assert len(children) == 2
        proc.send_signal(how)
        return proc.wait(40), children
    finally:
        kill_left([proc])  # and its own: the nodes, an embedded Redis


def shutdowns(log: str) -> int:
    """How many nodes closed after a stop, by their summary lines."""
    return len(re.findall(r"crawlfleet node \S+ closed \(shutdown\)", log))


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_reaches_every_node_once(
    how: signal.Signals,
    redis_server_url: str,
    key_prefix: str,
    node_env: dict[str, str],
    tmp_path: Path,
) -> None:
    log = tmp_path / "nodes.log"
    with LoopbackSite(slow_endless) as site:
        proc = command(site, "stopped", redis_server_url, node_env, tmp_path, 2)
        code, children = signalled(site, proc, log, how)
    text = log.read_text()
    assert code == 0, text[-3000:]
    # each node stopped gracefully (a second signal would have forced it: not seen)
    assert text.count("shutting down gracefully") == 2, text[-3000:]
    assert "forcing unclean shutdown" not in text, text[-3000:]
    assert shutdowns(text) == 2, text[-3000:]
    assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)
    assert leased(redis_server_url, key_prefix, "stopped") == 0  # every lease given back


def on_embedded_redis(site: LoopbackSite, tmp_path: Path, job: str) -> subprocess.Popen[bytes]:
    """``crawlfleet crawl --processes 2`` of *site* with no Redis URL: the command starts
    the embedded Redis of its data directory (``tmp_path / "data"``) and holds it for
    its nodes; their log is ``tmp_path / "nodes.log"``."""
    env = {k: v for k, v in os.environ.items() if k != "CRAWLFLEET_REDIS_URL"}
    settings = [f"CRAWLFLEET_DATA_DIR={tmp_path / 'data'}", "CONCURRENT_REQUESTS=2"]
    with (tmp_path / "nodes.log").open("wb") as sink:
        return subprocess.Popen(
            [
                *(sys.executable, "-m", "crawlfleet.cli.main", "crawl", SPIDER, "--job", job),
                *("--processes", "2", "-a", f"start_urls={site.url}", "-s", "LOG_LEVEL=INFO"),
                *(arg for setting in settings for arg in ("-s", setting)),
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=ROOT,
        )


def test_a_hang_up_stops_the_nodes_and_then_the_embedded_redis(tmp_path: Path) -> None:
    # the command holds the embedded Redis for its nodes until the last is done, then
    # shuts it down (its last user)
    log = tmp_path / "nodes.log"
    with LoopbackSite(slow_endless) as site:
        proc = on_embedded_redis(site, tmp_path, "hup")
        try:
            started(site, proc, log, 6)
            port = int((tmp_path / "data" / "redis" / "port").read_text())
        except BaseException:
            kill_left([proc])
            raise
        code, _ = signalled(site, proc, log, signal.SIGHUP)
    text = log.read_text()
    assert code == 0, text[-3000:]
    assert shutdowns(text) == 2, text[-3000:]
    assert not (tmp_path / "data" / "redis" / "port").exists()
    with pytest.raises(OSError):  # shut down: nobody answers on its port
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_the_embedded_redis_goes_with_the_nodes_of_a_killed_command(tmp_path: Path) -> None:
    # kill -9: the command releases nothing; its nodes (SIGTERM from Linux) stop, and
    # then the Redis that nobody uses any more is shut down by its watchdog
    log = tmp_path / "nodes.log"
    with LoopbackSite(slow_endless) as site:
        proc = on_embedded_redis(site, tmp_path, "killed")
        redis_pid = 0
        try:
            started(site, proc, log, 6)
            port = int((tmp_path / "data" / "redis" / "port").read_text())
            redis_pid = pid_of(port)
            children = nodes(proc)
            assert len(children) == 2
            proc.kill()
            proc.wait(10)
            _, alive = psutil.wait_procs(children, timeout=40)
            assert not alive, log.read_text()[-3000:]
            assert poll(lambda: not running(redis_pid), 10), log.read_text()[-3000:]
        finally:
            kill_left([proc])
            if redis_pid:
                kill_if_left(redis_pid)
    text = log.read_text()
    assert shutdowns(text) == 2, text[-3000:]
    assert not (tmp_path / "data" / "redis" / "port").exists()
    assert "Stopped embedded Redis" in (tmp_path / "data" / "redis" / "watchdog.log").read_text()


def test_nodes_stop_when_their_command_is_killed(
    redis_server_url: str, key_prefix: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "nodes.log"
    with LoopbackSite(slow_endless) as site:
        proc = command(site, "orphans", redis_server_url, node_env, tmp_path, 2)
        children: list[psutil.Process] = []
        try:
            started(site, proc, log, 8)
            children = psutil.Process(proc.pid).children()
            assert len(children) == 2
            proc.kill()  # no hand-on: Linux sends each node SIGTERM
            proc.wait(10)
            _, alive = psutil.wait_procs(children, timeout=40)
        finally:
            for child in children:
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()
    text = log.read_text()
    assert not alive, text[-3000:]
    assert shutdowns(text) == 2, text[-3000:]
    assert leased(redis_server_url, key_prefix, "orphans") == 0


@pytest.mark.parametrize(
    ("bodies", "status"),
    [
        ("0, 0, 0", 0),
        ("0, 1, 0", 1),
        ("1, 2, 0", 2),  # a setting refused wins over a failure
        ("0, 'killed', 0", 1),  # a node that died of a signal
        ("0, 'raised', 0", 1),  # a node whose code raised
    ],
)
def test_the_command_exits_with_the_worst_status_of_its_nodes(bodies: str, status: int) -> None:
    script = f"""
import os, signal, sys
from crawlfleet.node.launcher import run_processes
def body(index):
    what = ({bodies})[index - 1]
    if what == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    if what == "raised":
        raise RuntimeError("node {{}} broke".format(index))
    return what
sys.exit(run_processes(3, body))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == status, done.stderr
    assert ("node 2 broke" in done.stderr) == ("raised" in bodies)
    assert ("crawlfleet: node 2 failed:" in done.stderr) == ("raised" in bodies)


def test_a_spider_that_refuses_its_arguments_fails_in_every_node(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    # the spider refuses its arguments in every node (no start_urls): 1, not 0
    proc = start_node(
        SPIDER,
        job="refused",
        redis_url=redis_server_url,
        log=tmp_path / "nodes.log",
        settings=node_env,
        processes=2,
        cwd=ROOT,
    )
    assert wait_all([proc], 60) == [1]
    text = (tmp_path / "nodes.log").read_text()
    assert text.count("LinkSpider could not start: ValueError") == 2, text[-3000:]


def test_auto_is_one_node_a_usable_cpu() -> None:
    def parsed(*command: str) -> str:
        code = (
            "import sys; from crawlfleet.cli.main import build_parser; "
            "print(build_parser('crawl').parse_args(sys.argv[1:]).processes)"
        )
        done = subprocess.run(
            [*command, sys.executable, "-c", code, "crawl", SPIDER, "--processes", "auto"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
            check=True,
        )
        return done.stdout.strip()

    cpus = os.sched_getaffinity(0)
    assert parsed() == str(min(len(cpus), MAX_PROCESSES))
    if shutil.which("taskset") is None:
        pytest.skip("taskset is not installed: a narrower affinity is not tried")
    # what the command may run on, not the machine
    assert parsed("taskset", "-c", str(min(cpus))) == "1"


@pytest.mark.parametrize("value", ["0", "65", "two"])
def test_a_wrong_process_count_is_one_line(value: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "crawlfleet.cli.main", "crawl", SPIDER, "--processes", value],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--processes" in lines[0], done.stderr
