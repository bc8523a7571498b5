"""The field part of ``crawlfleet bench``: crawls with the nodes' Redis a network hop
away and the nodes' CPU full, as the site sees them.

Each run puts a delaying TCP proxy (:mod:`crawlfleet.benchmark.delay`, a process of its
own) between the nodes and Redis, ``delay_ms`` more per round trip; seeding and control
reach Redis directly. The 0-ms runs go through the proxy too, so a ratio against them
measures the delay, not the proxy's hop. Beside the nodes, ``hogs`` busy-loop processes
at the nodes' niceness (:data:`~crawlfleet.benchmark.crawl.CRAWLER_NICENESS`) take
their share of the cores; the site, Redis and the proxy, which would be other machines
in a fleet, run before both.

- Polite (:func:`run_field_polite`): N nodes on one site of two hosts: ``127.0.0.1``
  limited to :data:`POLITE_LIMIT` by ``CRAWLFLEET_RATE_LIMITS``, ``127.0.0.2`` paced by
  the project's ``DOWNLOAD_DELAY`` (:data:`DOWNLOAD_DELAY`), which crawlfleet makes a
  fleet-wide budget of one request per delay for every site the limits do not name.
  Each host is seeded with what its budget serves in *seconds*; the nodes run
  :class:`~crawlfleet.benchmark.polite.PageListSpider` (no parsing). Per host, from the
  site's own arrival times: budget use over its first to last request, the most
  requests in any window of the budget's length (two requests closer than the delay
  are 2 in a window of it), the shortest gap; next to them, the site's own event-loop
  stalls (a 2-ms ticker's lateness), so that a window the site bunched up in a stall is
  told from a node's early send. Slots given back (``crawlfleet/scheduler/late``) are
  counted by the nodes for the run, not by host.
- CPU-bound (:func:`run_field_cpu`): N nodes crawl the bundled site with its parsing
  spider, no limit: pages/s (as the site counts them) against the faster of two 0-ms
  runs beside as many hogs, one before the other delays and one after
  (:func:`set_ratios`), and pages fetched twice (a live node's lease re-issued) or
  never.

Every process a run starts (proxy, hogs, nodes, site) ends with it, on Ctrl-C and
failures too (and on SIGTERM inside :func:`interrupt_on_sigterm`); a hog also ends on
its own when its parent dies or after its time.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from crawlfleet.benchmark.crawl import (
    CRAWLER_NICENESS,
    CrawlResult,
    Scenario,
    crawl_settings,
    kill_left,
    read_node_stats,
    renice,
    run_crawl,
    seed_job,
    set_job_state,
    wait_measured,
)
from crawlfleet.benchmark.delay import start_delay_proxy, stop_delay_proxy
from crawlfleet.exceptions import ConfigError
from crawlfleet.node.launcher import start_node
from crawlfleet.testsite.model import SiteModel, host_address
from crawlfleet.testsite.process import fetch_stats, start_site_process, stop_site_process

__all__ = [
    "DOWNLOAD_DELAY",
    "POLITE_LIMIT",
    "FieldCpuResult",
    "FieldHost",
    "FieldPoliteResult",
    "cpu_hogs",
    "delayed_redis",
    "field_delays",
    "field_hogs",
    "interrupt_on_sigterm",
    "most_in_window",
    "run_field_cpu",
    "run_field_polite",
    "set_ratios",
]

#: The limited host's budget (CRAWLFLEET_RATE_LIMITS), as requests and window.
POLITE_LIMIT = "20/1s"
POLITE_COUNT, POLITE_WINDOW = 20, 1.0
#: The paced host's DOWNLOAD_DELAY (s): a budget of 1 request per delay.
DOWNLOAD_DELAY = 0.5
#: The site's ticker period (s): its own stalls are measured to about this.
STALL_TICK_SECONDS = 0.002
#: Requests each node has in flight at most.
POLITE_CONCURRENCY = 8
CPU_CONCURRENCY = 16
#: The longest a polite run may take, beyond twice its planned length (s): start-up
#: beside hogs takes about 10 s; a run that never gets its slots is stopped at it.
POLITE_SLACK_SECONDS = 60.0
#: The longest a CPU-bound run may take (s).
CPU_TIMEOUT_SECONDS = 600.0

#: A busy loop at a niceness (argv 1) for at most argv 2 seconds, that ends when its
#: parent does (a bench killed with SIGKILL leaves no hog behind for long).
_HOG = (
    "import os, sys, time\n"
    "os.nice(int(sys.argv[1]))\n"
    "parent, end = os.getppid(), time.monotonic() + float(sys.argv[2])\n"
    "while os.getppid() == parent and time.monotonic() < end:\n"
    "    for _ in range(200_000):\n"
    "        pass\n"
)


@dataclass
class FieldHost:
    """What one host of a polite run saw (its own arrival times)."""

    host: str
    budget: str  #: "20/1s", or "1/0.5s (DOWNLOAD_DELAY)"
    allowed: int  #: requests the budget allows in a window
    window_seconds: float
    pages: int  #: seeded
    requests: int
    seconds: float  #: first to last request
    most_in_window: int  #: the most requests in any window of the budget's length
    min_gap_ms: float  #: the shortest time between two requests
    fetched_twice: int
    never_fetched: int
    #: how much closer than the window the closest ``allowed + 1`` requests came (ms;
    #: 0: never over the budget)
    over_by_ms: float
    #: the site's longest event-loop stall that overlapped those requests (ms): the
    #: most its own stalls can have bunched them by
    stall_in_window_ms: float
    #: over the budget: the arrivals of its first busiest window (s after the first)
    busiest_window: list[float] = field(default_factory=list)

    @property
    def achieved(self) -> float:
        return (self.requests - 1) / self.seconds if self.seconds > 0 else 0.0

    @property
    def use(self) -> float:
        """Share of the budget used (1.0: exactly the limit)."""
        return self.achieved * self.window_seconds / self.allowed

    @property
    def over(self) -> bool:
        return self.most_in_window > self.allowed

    @property
    def beyond_stall_ms(self) -> float:
        """How much over the budget the site's own stalls do not explain (ms): a node's
        early or late send."""
        return max(0.0, self.over_by_ms - self.stall_in_window_ms) if self.over else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "achieved": self.achieved,
            "use": self.use,
            "beyond_stall_ms": self.beyond_stall_ms,
        }


@dataclass
class FieldPoliteResult:
    delay_ms: float  #: added per round trip to Redis
    hogs: int
    nodes: int
    hosts: list[FieldHost]
    pages: int
    late: int  #: requests given back unsent, all hosts: their node missed the slot
    #: the site's longest event-loop stall from its first to its last request (ms)
    site_stall_max_ms: float
    exit_codes: list[int | None] = field(default_factory=list)

    @property
    def late_per_page(self) -> float:
        return self.late / max(self.pages, 1)

    @property
    def stopped(self) -> bool:
        """Some node was still crawling at the run's time limit (then killed)."""
        return any(code is None for code in self.exit_codes)

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "hosts": [h.as_dict() for h in self.hosts],
            "late_per_page": self.late_per_page,
            "stopped": self.stopped,
        }


@dataclass
class FieldCpuResult:
    delay_ms: float
    hogs: int
    nodes: int
    pages: int
    requests: int
    pages_per_second: float
    seconds: float
    fetched_twice: int
    never_fetched: int
    round_trips_per_page: float | None
    late: int
    exit_codes: list[int | None] = field(default_factory=list)
    #: pages/s against the 0-ms run beside as many hogs (None: no such run)
    ratio: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def field_delays(text: str) -> list[float]:
    """The delays (ms per round trip) of ``--field-delays``, 0 among them (the runs
    the others are read against); ConfigError naming the option."""
    try:
        delays = [float(d) for d in text.split(",") if d.strip()]
    except ValueError:
        delays = []
    if not delays or min(delays) < 0 or 0 not in delays:
        raise ConfigError(
            f"--field-delays must be milliseconds >= 0 like 0,5,50, 0 among them, got {text!r}"
        )
    return sorted(set(delays))


def field_hogs(text: str, cores: int | None = None) -> list[int]:
    """The hog counts of ``--field-hogs``: whole numbers, or ``<k>x`` for k times the
    cores (*cores*, default this machine's); ConfigError naming the option."""
    cores = cores or os.cpu_count() or 1
    counts: list[int] = []
    for part in (p.strip().lower() for p in text.split(",")):
        if not part:
            continue
        times = part.endswith("x")
        number = part[:-1] if times else part
        if not number.isdigit():
            raise ConfigError(
                f"--field-hogs must be whole numbers or k times the cores like 0,2x, got {text!r}"
            )
        counts.append(int(number) * cores if times else int(number))
    if not counts:
        raise ConfigError(f"--field-hogs names no hog count, got {text!r}")
    return sorted(set(counts))


@contextlib.contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """Within: SIGTERM raises KeyboardInterrupt, so every clean-up on the way out runs."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def delayed_redis(redis_url: str, delay_ms: float) -> Iterator[str]:
    """The URL of a delay proxy in front of the loopback Redis at *redis_url*,
    *delay_ms* more per round trip; the proxy ends on the way out."""
    parts = urllib.parse.urlsplit(redis_url)
    if parts.scheme not in ("redis", "valkey") or parts.hostname not in (
        "127.0.0.1",
        "localhost",
    ):
        raise ConfigError(
            "the field part delays a Redis on 127.0.0.1 through a proxy: it needs a "
            f"redis://127.0.0.1:PORT URL, got {parts.scheme}://{parts.hostname or ''}"
        )
    proc, port = start_delay_proxy(parts.port or 6379, delay_ms)
    try:
        user = parts.netloc.rpartition("@")[0]
        netloc = f"{user}@127.0.0.1:{port}" if user else f"127.0.0.1:{port}"
        yield urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    finally:
        stop_delay_proxy(proc)


@contextlib.contextmanager
def cpu_hogs(count: int, seconds: float) -> Iterator[list[subprocess.Popen[bytes]]]:
    """*count* busy-loop processes at the nodes' niceness, each for at most *seconds*;
    killed on the way out."""
    hogs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            hogs.append(
                subprocess.Popen(
                    [sys.executable, "-c", _HOG, str(CRAWLER_NICENESS), repr(seconds)],
                    stdin=subprocess.DEVNULL,
                )
            )
        yield hogs
    finally:
        for hog in hogs:
            if hog.poll() is None:
                hog.kill()
        for hog in hogs:
            hog.wait()


def most_in_window(times: list[float], width: float) -> tuple[int, float]:
    """The most of *times* (ascending) in any window ``(t - width, t]``, and the end of
    the first window that holds that many (0.0 for no times)."""
    best, end, low = 0, 0.0, 0
    for high, t in enumerate(times):
        while times[low] <= t - width:
            low += 1
        if high - low + 1 > best:
            best, end = high - low + 1, t
    return best, end


def _stall_in(stalls: list[list[float]], start: float, end: float) -> float:
    """The longest of the site's *stalls* ([time, ms]) that overlapped (start, end]."""
    times = [s[0] for s in stalls]
    first = bisect.bisect_left(times, start - 10.0)  # no stall is kept longer than that
    return max(
        (ms for at, ms in stalls[first:] if at <= end and at + ms / 1000 > start), default=0.0
    )


def _host_figures(
    stats: dict[str, Any],
    host: int,
    urls: list[str],
    budget: str,
    allowed: int,
    window: float,
) -> FieldHost:
    name = host_address(host)
    times = stats["arrivals"][name]
    most, end = most_in_window(times, window)
    # the closest allowed + 1 requests: over the budget when they span less than window
    spans = [(times[i + allowed] - times[i], i) for i in range(len(times) - allowed)]
    tightest, first = min(spans, default=(window, 0))
    counts = stats["requests"]
    stalls = (stats.get("loop_stalls") or {}).get("stalls", [])
    return FieldHost(
        host=name,
        budget=budget,
        allowed=allowed,
        window_seconds=window,
        pages=len(urls),
        requests=len(times),
        seconds=round(times[-1] - times[0], 6) if times else 0.0,
        most_in_window=most,
        min_gap_ms=round(1000 * min((b - a for a, b in itertools.pairwise(times)), default=0.0), 3),
        fetched_twice=sum(1 for u in urls if counts.get(u, 0) > 1),
        never_fetched=sum(1 for u in urls if not counts.get(u)),
        over_by_ms=round(max(0.0, window - tightest) * 1000, 3),
        stall_in_window_ms=(
            _stall_in(stalls, times[first], times[first + allowed]) if spans else 0.0
        ),
        busiest_window=[t for t in times if end - window < t <= end] if most > allowed else [],
    )


def run_field_polite(
    delay_ms: float,
    *,
    hogs: int,
    nodes: int,
    seconds: float,
    redis_url: str,
    key_prefix: str,
) -> FieldPoliteResult:
    """One polite run (see the module docstring): the budgets' hosts seeded for about
    *seconds*, crawled by *nodes* nodes with Redis *delay_ms* away beside *hogs* hogs."""
    per_host = [max(POLITE_COUNT, round(POLITE_COUNT / POLITE_WINDOW * seconds))]
    per_host.append(max(4, round(seconds / DOWNLOAD_DELAY)))
    model = SiteModel(pages=2 * per_host[0], hosts=2, problems=False)
    timeout = 2 * seconds + POLITE_SLACK_SECONDS
    workdir = Path(tempfile.mkdtemp(prefix="crawlfleet-field-"))
    procs: list[subprocess.Popen[bytes]] = []
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, workdir, ignore_errors=True)
        site, port = start_site_process(
            model, stall_tick_seconds=STALL_TICK_SECONDS, stderr=subprocess.DEVNULL
        )
        stack.callback(stop_site_process, site)
        urls = [
            [model.url(n, port) for n in range(h, model.pages, model.hosts)][:count]
            for h, count in enumerate(per_host)
        ]
        node_url = stack.enter_context(delayed_redis(redis_url, delay_ms))
        job = f"bench-field-polite-{delay_ms:g}ms-{hogs}hogs-{int(time.time() * 1000)}"
        seed_job(job, [u for host_urls in urls for u in host_urls], redis_url, key_prefix, workdir)
        asyncio.run(set_job_state(redis_url, key_prefix, job, "paused"))
        settings = {
            **crawl_settings(POLITE_CONCURRENCY),
            "CRAWLFLEET_RATE_LIMITS": json.dumps({host_address(0): POLITE_LIMIT}),
            "DOWNLOAD_DELAY": DOWNLOAD_DELAY,
            "CRAWLFLEET_ITEM_STAGES": "",
            "CRAWLFLEET_KEY_PREFIX": key_prefix,
            "CRAWLFLEET_FINISH_GRACE_SECONDS": 0.5,
        }
        stack.enter_context(cpu_hogs(hogs, timeout + 60))
        stack.callback(kill_left, procs)  # before the hogs, the proxy and the site
        for i in range(nodes):
            procs.append(
                start_node(
                    "crawlfleet.benchmark.polite:PageListSpider",
                    job=job,
                    redis_url=node_url,
                    log=workdir / f"node{i}.log",
                    settings={**settings, "CRAWLFLEET_STATS_FILE": str(workdir / f"stats{i}.json")},
                )
            )
            renice(procs[-1].pid)
        asyncio.run(set_job_state(redis_url, key_prefix, job, "running", wait_nodes=nodes))
        codes, _cpu = wait_measured(procs, timeout)
        stats = fetch_stats(port, arrivals=True)
        node_stats = read_node_stats(workdir, nodes)
    budgets = [
        (POLITE_LIMIT, POLITE_COUNT, POLITE_WINDOW),
        (f"1/{DOWNLOAD_DELAY:g}s (DOWNLOAD_DELAY)", 1, DOWNLOAD_DELAY),
    ]
    hosts = [
        _host_figures(stats, h, urls[h], budget, allowed, window)
        for h, (budget, allowed, window) in enumerate(budgets)
    ]
    stalls = (stats.get("loop_stalls") or {}).get("stalls", [])
    span = max((times[-1] for times in stats["arrivals"].values() if times), default=0.0)
    return FieldPoliteResult(
        delay_ms=delay_ms,
        hogs=hogs,
        nodes=nodes,
        hosts=hosts,
        pages=sum(per_host),
        late=sum(int(s.get("crawlfleet/scheduler/late", 0)) for s in node_stats),
        site_stall_max_ms=_stall_in(stalls, 0.0, span) if span else 0.0,
        exit_codes=codes,
    )


def run_field_cpu(
    delay_ms: float,
    *,
    hogs: int,
    nodes: int,
    pages: int,
    redis_url: str,
    key_prefix: str,
) -> FieldCpuResult:
    """One CPU-bound run: *nodes* nodes crawl a *pages*-page site with its parsing
    spider, no limit, with Redis *delay_ms* away beside *hogs* hogs."""
    scenario = Scenario(f"field-cpu-{delay_ms:g}ms-{hogs}hogs", pages, 0.0, CPU_CONCURRENCY)
    with delayed_redis(redis_url, delay_ms) as node_url, cpu_hogs(hogs, CPU_TIMEOUT_SECONDS + 60):
        r: CrawlResult = run_crawl(
            scenario,
            "crawlfleet",
            nodes,
            redis_url=redis_url,
            key_prefix=key_prefix,
            timeout=CPU_TIMEOUT_SECONDS,
            node_redis_url=node_url,
        )
    return FieldCpuResult(
        delay_ms=delay_ms,
        hogs=hogs,
        nodes=nodes,
        pages=pages,
        requests=r.requests,
        pages_per_second=r.pages_per_second,
        seconds=r.seconds,
        fetched_twice=r.fetched_twice,
        never_fetched=r.never_fetched,
        round_trips_per_page=r.round_trips_per_page,
        late=r.late,
        exit_codes=r.exit_codes,
    )


def set_ratios(runs: list[FieldCpuResult]) -> None:
    """Each run's pages/s against the fastest 0-ms run beside as many hogs (the part
    runs one before the other delays and one after: a machine busy with something
    else during one of them does not flatter the others)."""
    for r in runs:
        base = max(
            (b.pages_per_second for b in runs if b.delay_ms == 0 and b.hogs == r.hogs),
            default=0.0,
        )
        if base > 0:
            r.ratio = round(r.pages_per_second / base, 3)
