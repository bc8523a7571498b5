"""Crawl throughput scenarios for ``crawlfleet bench``.

Each run crawls a fresh bundled test site (its own process, so it does not share a GIL
with Scrapy) with the test-site spider, in separate processes: vanilla Scrapy (its
memory scheduler) or N crawlfleet nodes of one job. Speed is measured by the site:
requests served divided by the time from its first to its last request, which leaves
out process start-up, the same for every contender. crawlfleet nodes start paused and
are resumed together once every one has joined the job (as an operator starts a
fleet): on a small machine, nodes still importing Scrapy would otherwise slow down the
first ones' crawl, a cost of starting processes, not of crawling.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from crawlfleet.frontier.client import Frontier
from crawlfleet.node.launcher import start_node
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.process import fetch_stats, start_site_process, stop_site_process
from crawlfleet.testsite.server import CLIENT_HEADER

__all__ = [
    "CrawlResult",
    "Scenario",
    "crawl_settings",
    "kill_left",
    "read_node_stats",
    "renice",
    "run_crawl",
    "seed_job",
    "set_job_state",
    "start_vanilla",
    "wait_measured",
]

SPIDER = "crawlfleet.testsite.spider:TestSiteSpider"
#: Niceness of the crawling processes (every contender's): the site and Redis, which
#: would run on other machines in a fleet, get the CPU first on a small benchmark box.
CRAWLER_NICENESS = 10
#: Longest wait for every node of a run to join its job.
JOIN_SECONDS = 120.0


@dataclass(frozen=True)
class Scenario:
    name: str
    pages: int
    latency_seconds: float
    concurrency: int
    hosts: int = 4
    #: a rate limit for every site ("2/1s"), crawlfleet only; "" for none
    rate_limit: str = ""
    #: the crawlfleet nodes' spider (``module:Class``; start_urls is always given)
    spider: str = SPIDER
    spider_args: tuple[tuple[str, str], ...] = ()
    #: crawlfleet: queue every page with ``crawlfleet seed`` before the nodes start
    preseed: bool = False
    #: crawlfleet: more settings of the nodes
    settings: tuple[tuple[str, str], ...] = ()
    #: crawlfleet: the nodes belong to this many jobs in turn (node i to job i % jobs),
    #: which share the pages between them (needs *preseed*)
    jobs: int = 1


@dataclass
class CrawlResult:
    scenario: str
    contender: str  # "scrapy", "crawlfleet", "crawlfleet+pipeline" or "scrapy-redis"
    nodes: int
    pages_per_second: float
    requests: int
    seconds: float
    fetched_twice: int
    never_fetched: int
    round_trips_per_page: float | None = None
    node_shares: list[float] = field(default_factory=list)
    exit_codes: list[int | None] = field(default_factory=list)
    #: several jobs: per job, when the site saw its last request, as a share of the
    #: run's span (a job starved while the other ran finishes near 1 / jobs)
    job_done_at: list[float] = field(default_factory=list)
    #: the run was stopped after this many seconds, before the crawl was complete
    capped_seconds: float | None = None
    #: per host, the most requests the site saw in any 1-second window
    max_rate_1s: dict[str, int] = field(default_factory=dict)
    #: crawlfleet: requests of rate-limited sites given back unsent (slot missed)
    late: int = 0
    #: CPU time (user + system) of the crawling processes, and per page in ms
    cpu_seconds: float = 0.0
    cpu_ms_per_page: float = 0.0
    #: of which before the site saw its first request (starting the processes), and the
    #: CPU per page after that (crawling and closing)
    startup_cpu_seconds: float = 0.0
    crawl_cpu_ms_per_page: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_node_stats(workdir: Path, nodes: int) -> list[dict[str, Any]]:
    """The final Scrapy stats of nodes 0 .. *nodes* - 1 (``CRAWLFLEET_STATS_FILE`` set to
    ``stats<i>.json`` in *workdir*); {} for a node that wrote none (killed)."""
    files = [workdir / f"stats{i}.json" for i in range(nodes)]
    return [json.loads(f.read_text(encoding="utf-8")) if f.exists() else {} for f in files]


def crawl_settings(concurrency: int) -> dict[str, Any]:
    """The settings every benchmark crawler runs with (vanilla Scrapy's and the nodes'):
    *concurrency* requests at a time, to one site as to all, quiet logs, no cookies."""
    return {
        "CONCURRENT_REQUESTS": concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": concurrency,
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
        "LOGSTATS_INTERVAL": 3600,
        "COOKIES_ENABLED": False,
    }


def run_crawl(
    scenario: Scenario,
    contender: str,
    nodes: int,
    *,
    redis_url: str = "",
    key_prefix: str = "cfbench",
    timeout: float = 900,
    cap_seconds: float | None = None,
    node_redis_url: str = "",
) -> CrawlResult:
    """Crawl a fresh site once; *contender* is "scrapy" (vanilla), "crawlfleet" or
    "scrapy-redis" (its scheduler and dupefilter, state kept on close). With
    *cap_seconds*, each process is stopped after that long (CLOSESPIDER_TIMEOUT).
    crawlfleet's nodes reach Redis at *node_redis_url* (a delaying proxy in front of
    it) when given; seeding and control use *redis_url*."""
    if scenario.jobs > 1 and not scenario.preseed:
        raise ValueError(f"scenario {scenario.name}: several jobs need preseed")
    model = SiteModel(pages=scenario.pages, hosts=scenario.hosts, problems=False)
    workdir = Path(tempfile.mkdtemp(prefix="crawlfleet-bench-"))
    site, port = start_site_process(
        model, latency_seconds=scenario.latency_seconds, stderr=subprocess.DEVNULL
    )
    procs: list[subprocess.Popen[bytes]] = []  # every one is killed on the way out
    try:
        seeds = ",".join(model.seed_urls(port))
        jobs: list[str] = []
        settings = crawl_settings(scenario.concurrency)
        if cap_seconds:
            settings["CLOSESPIDER_TIMEOUT"] = cap_seconds
        if contender == "scrapy":
            procs.append(start_vanilla(seeds, settings, workdir))
        elif contender == "scrapy-redis":
            tag = f"{key_prefix}-scrapy-redis-{int(time.time() * 1000)}"
            settings.update(
                {
                    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
                    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
                    "REDIS_URL": redis_url,
                    "SCHEDULER_PERSIST": True,  # its default wipes the shared queue on close
                    "SCHEDULER_QUEUE_KEY": f"{tag}:requests",
                    "SCHEDULER_DUPEFILTER_KEY": f"{tag}:dupefilter",
                }
            )
            for i in range(nodes):
                procs.append(start_vanilla(seeds, settings, workdir, i))
        else:
            base = f"bench-{scenario.name}-{nodes}-{int(time.time() * 1000)}"
            jobs = [base] if scenario.jobs == 1 else [f"{base}-j{k}" for k in range(scenario.jobs)]
            if scenario.rate_limit:
                settings["CRAWLFLEET_RATE_LIMITS"] = json.dumps({"*": scenario.rate_limit})
            settings.update(dict(scenario.settings))
            if contender == "crawlfleet+pipeline":  # every item stage, into SQLite
                settings["CRAWLFLEET_STORES"] = "sql"
                settings["CRAWLFLEET_SQL_URL"] = f"sqlite:///{workdir / 'items.sqlite3'}"
            else:  # the frontier alone, as vanilla Scrapy has no item stages
                settings["CRAWLFLEET_ITEM_STAGES"] = ""
            if scenario.preseed:
                urls = sorted(model.expected_urls(port))
                for k, job in enumerate(jobs):
                    seed_job(job, urls[k :: len(jobs)], redis_url, key_prefix, workdir)
            for job in jobs:
                asyncio.run(set_job_state(redis_url, key_prefix, job, "paused"))
            for i in range(nodes):
                procs.append(
                    start_node(
                        scenario.spider,
                        job=jobs[i % len(jobs)],
                        redis_url=node_redis_url or redis_url,
                        log=workdir / f"node{i}.log",
                        spider_args={"start_urls": seeds, **dict(scenario.spider_args)},
                        settings={
                            **settings,
                            **_job_label(i, len(jobs)),
                            "CRAWLFLEET_KEY_PREFIX": key_prefix,
                            "CRAWLFLEET_STATS_FILE": str(workdir / f"stats{i}.json"),
                            "CRAWLFLEET_FINISH_GRACE_SECONDS": 0.5,
                        },
                    )
                )
        for p in procs:
            renice(p.pid)
        for k, job in enumerate(jobs):
            joining = len(range(k, nodes, len(jobs)))
            asyncio.run(set_job_state(redis_url, key_prefix, job, "running", wait_nodes=joining))
        startup = _cpu_at_first_request(procs, port, timeout)
        codes, cpu = wait_measured(procs, timeout)
        kill_left(procs)
        stats = fetch_stats(port, brief=True)
    finally:
        kill_left(procs)
        stop_site_process(site)
    requests = int(stats["total_requests"])
    seconds = float(stats["active_seconds"]) or 1e-9
    result = CrawlResult(
        scenario=scenario.name,
        contender=contender,
        nodes=nodes,
        pages_per_second=requests / seconds,
        requests=requests,
        seconds=seconds,
        fetched_twice=len(stats["fetched_twice"]),
        never_fetched=len(stats["never_fetched"]),
        exit_codes=codes,
        capped_seconds=cap_seconds if stats["never_fetched"] else None,
        max_rate_1s={h: int(f["max_rate_1s"]) for h, f in stats["hosts"].items()},
        cpu_seconds=round(cpu, 3),
        cpu_ms_per_page=round(1000 * cpu / max(requests, 1), 3),
        startup_cpu_seconds=round(startup, 3),
        crawl_cpu_ms_per_page=round(1000 * max(cpu - startup, 0.0) / max(requests, 1), 3),
    )
    if contender.startswith("crawlfleet"):
        node_stats = read_node_stats(workdir, nodes)
        trips = sum(s.get("crawlfleet/redis/round_trips", 0) for s in node_stats)
        pages = [s.get("response_received_count", 0) for s in node_stats]
        result.round_trips_per_page = trips / max(sum(pages), 1)
        result.node_shares = [p / max(sum(pages), 1) for p in pages]
        if len(jobs) > 1:
            result.job_done_at = _done_at(stats["clients"], len(jobs))
        result.late = sum(s.get("crawlfleet/scheduler/late", 0) for s in node_stats)
    shutil.rmtree(workdir, ignore_errors=True)
    return result


def wait_measured(
    procs: list[subprocess.Popen[bytes]], timeout: float
) -> tuple[list[int | None], float]:
    """Exit codes of *procs* (None: still up after *timeout* seconds in all) and the
    CPU seconds (user + system) the exited ones used, as the kernel counted them."""
    deadline = time.monotonic() + timeout
    codes: list[int | None] = [None] * len(procs)
    cpu = 0.0
    pending = set(range(len(procs)))
    while pending and time.monotonic() < deadline:
        for i in sorted(pending):
            pid, status, usage = os.wait4(procs[i].pid, os.WNOHANG)
            if pid:
                code = os.waitstatus_to_exitcode(status)
                procs[i].returncode = code  # reaped here: Popen must not wait again
                codes[i] = code
                cpu += usage.ru_utime + usage.ru_stime
                pending.discard(i)
        if pending:
            time.sleep(0.02)
    return codes, cpu


def kill_left(procs: Iterable[subprocess.Popen[bytes]], wait: float = 10.0) -> None:
    """Kill every process of *procs* still running, and its own (the nodes of a
    ``crawlfleet crawl --processes`` command), and reap it (at most *wait* seconds
    each): what a run leaves behind when it ends, or fails."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(p.pid).children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        child.kill()
            p.kill()
            p.wait(wait)


def _cpu_at_first_request(procs: list[subprocess.Popen[bytes]], port: int, timeout: float) -> float:
    """CPU seconds the processes used until the site on *port* saw its first request
    (polled every 20 ms; what they used until then is starting, not crawling)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not any(_exited(p.pid) for p in procs):
        if int(fetch_stats(port, brief=True)["total_requests"]) > 0:
            break
        time.sleep(0.02)
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(p.pid).cpu_times()
            total += times.user + times.system
    return total


def _exited(pid: int) -> bool:
    """Whether child *pid* has exited, without reaping it (wait_measured does that)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def renice(pid: int) -> None:
    """Give process *pid* CRAWLER_NICENESS (a process already gone is left alone)."""
    with contextlib.suppress(ProcessLookupError):
        os.setpriority(os.PRIO_PROCESS, pid, CRAWLER_NICENESS)


async def set_job_state(
    redis_url: str, key_prefix: str, job: str, state: str, *, wait_nodes: int = 0
) -> None:
    """Set *job*'s nodes to *state*, once *wait_nodes* nodes have joined it (at most
    JOIN_SECONDS)."""
    client = make_client(redis_url)
    try:
        keys = JobKeys.of(key_prefix, job)
        deadline = time.monotonic() + JOIN_SECONDS
        while await client.zcard(keys.nodes) < wait_nodes and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await Frontier(client, keys).send_control("*", "state", state)
    finally:
        await client.aclose()


def _job_label(node: int, jobs: int) -> dict[str, str]:
    """Several jobs: the settings that make node *node* send its job's label ("j<k>")
    to the site, which counts requests by it."""
    if jobs < 2:
        return {}
    return {"DEFAULT_REQUEST_HEADERS": json.dumps({CLIENT_HEADER: f"j{node % jobs}"})}


def _done_at(clients: dict[str, dict[str, Any]], jobs: int) -> list[float]:
    """Per job, when the site saw its last request, as a share of the whole run."""
    labels = [clients.get(f"j{k}", {}) for k in range(jobs)]
    if not all(labels):
        return [0.0] * jobs
    start = min(c["first"] for c in labels)
    span = max(c["last"] for c in labels) - start
    return [round((c["last"] - start) / span, 3) if span > 0 else 1.0 for c in labels]


def seed_job(job: str, urls: list[str], redis_url: str, key_prefix: str, workdir: Path) -> None:
    """Queue *urls* in *job* with ``crawlfleet seed``."""
    seeds = workdir / f"seeds-{job}.txt"
    seeds.write_text("\n".join(urls) + "\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "crawlfleet.cli.main", "seed", job, "--file", str(seeds)]
    cmd += ["--redis-url", redis_url, "-s", f"CRAWLFLEET_KEY_PREFIX={key_prefix}"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)


def start_vanilla(
    seeds: str,
    settings: dict[str, Any],
    workdir: Path,
    index: int = 0,
    *,
    spider: str = SPIDER,
    spider_args: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """One vanilla Scrapy process crawling from *seeds* with *spider* (the test site's
    by default), its output in ``vanilla<index>.log`` of *workdir*."""
    cmd = [
        sys.executable,
        "-m",
        "crawlfleet.benchmark.vanilla",
        spider,
        "-a",
        f"start_urls={seeds}",
    ]
    for name, value in (spider_args or {}).items():
        cmd += ["-a", f"{name}={value}"]
    for name, value in settings.items():
        cmd += ["-s", f"{name}={value}"]
    log = open(workdir / f"vanilla{index}.log", "wb")  # noqa: SIM115 - closed below
    try:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    finally:
        log.close()
