"""Load-balancing scenarios for ``crawlfleet bench`` (issue: dynamic feedback).

Every run crawls a fresh latency-bound test site (its own process) with crawlfleet
nodes of one job. Each node sends its own label in the ``X-Crawlfleet-Client`` header,
so the site counts who fetched what and when (first and last arrival on the machine's
monotonic clock, comparable with this process's ``time.monotonic()``):

- ``equal``: two identical nodes; each node's share of the pages.
- ``uneven``: one node three times slower (every request waits twice the site's
  latency before it is sent, holding its download slot, as on a slow link). Each
  node's capacity is its own rate while it worked (requests / its first-to-last
  span); the ideal time is pages / (sum of capacities); the measured time is the
  site's first-to-last span. Also: how long after the fast node's last request the
  slow node's last one came (its backlog at the end).
- ``join``: one node; a second one is started when half the pages are fetched; the
  delay from its start (process start-up included) to its first request.
- ``kill``: two nodes; one is killed with SIGKILL when half the pages are fetched;
  pages never fetched must be 0.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crawlfleet.benchmark.crawl import kill_left
from crawlfleet.node.launcher import start_node, wait_all
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.process import fetch_stats, start_site_process, stop_site_process
from crawlfleet.testsite.server import CLIENT_HEADER

__all__ = ["BalanceResult", "balance_targets", "run_balance"]

SPIDER = "crawlfleet.testsite.spider:TestSiteSpider"
SLOWDOWN = "crawlfleet.testsite.slowdown.ExtraLatency"
POLL_SECONDS = 0.05


@dataclass
class BalanceResult:
    case: str
    pages: int
    seconds: float  #: the site's first to last request
    fetched_twice: int
    never_fetched: int
    #: label -> {"requests", "first", "last", "share", "rate"}
    nodes: dict[str, dict[str, float]] = field(default_factory=dict)
    exit_codes: list[int | None] = field(default_factory=list)
    #: uneven: pages / summed capacity
    ideal_seconds: float | None = None
    #: uneven: the slow node's last request after the fast node's (s)
    slow_tail_seconds: float | None = None
    #: join: from the late node's start to its first request (s)
    join_delay_seconds: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_balance(
    case: str,
    *,
    pages: int,
    latency: float,
    concurrency: int,
    redis_url: str,
    key_prefix: str,
    timeout: float = 600,
) -> BalanceResult:
    """Run one case ("equal", "uneven", "join" or "kill") on a fresh site."""
    if case not in ("equal", "uneven", "join", "kill"):
        raise ValueError(f"unknown balance case {case!r}")
    model = SiteModel(pages=pages, hosts=4, problems=False)
    workdir = Path(tempfile.mkdtemp(prefix="crawlfleet-balance-"))
    site, port = start_site_process(model, latency_seconds=latency, stderr=subprocess.DEVNULL)
    job = f"balance-{case}-{int(time.time() * 1000)}"
    seeds = ",".join(model.seed_urls(port))

    def node(label: str, **extra: Any) -> subprocess.Popen[bytes]:
        settings: dict[str, Any] = {
            "CONCURRENT_REQUESTS": concurrency,
            "CONCURRENT_REQUESTS_PER_DOMAIN": concurrency,
            "LOG_LEVEL": "INFO",
            "TELNETCONSOLE_ENABLED": False,
            "COOKIES_ENABLED": False,
            "CRAWLFLEET_ITEM_STAGES": "",
            "CRAWLFLEET_KEY_PREFIX": key_prefix,
            "CRAWLFLEET_FINISH_GRACE_SECONDS": 0.5,
            "CRAWLFLEET_HEARTBEAT_SECONDS": 1.0,
            "CRAWLFLEET_NODE_TIMEOUT_SECONDS": 3.0,
            "CRAWLFLEET_RECLAIM_SECONDS": 1.0,
            "DEFAULT_REQUEST_HEADERS": json.dumps({CLIENT_HEADER: label}),
            **extra,
        }
        return start_node(
            SPIDER,
            job=job,
            redis_url=redis_url,
            log=workdir / f"{label}.log",
            spider_args={"start_urls": seeds},
            settings=settings,
        )

    def when_half_fetched(action: Callable[[], None]) -> None:
        deadline = time.monotonic() + timeout
        while fetch_stats(port, brief=True)["content_fetched"] < pages // 2:
            if time.monotonic() > deadline:
                raise TimeoutError(f"balance/{case}: half of the site not fetched in time")
            time.sleep(POLL_SECONDS)
        action()

    started: dict[str, float] = {}
    try:
        if case == "equal":
            procs = [node("a"), node("b")]
        elif case == "uneven":
            slow = {"DOWNLOADER_MIDDLEWARES": json.dumps({SLOWDOWN: 50})}
            slow["TESTSITE_EXTRA_LATENCY_SECONDS"] = repr(2 * latency)
            procs = [node("fast"), node("slow", **slow)]
        elif case == "join":
            procs = [node("first")]

            def join() -> None:
                started["late"] = time.monotonic()
                procs.append(node("late"))

            when_half_fetched(join)
        else:
            procs = [node("survivor"), node("killed")]

            def kill() -> None:
                procs[1].send_signal(signal.SIGKILL)
                procs[1].wait()

            when_half_fetched(kill)
        codes = wait_all(procs, timeout)
        kill_left(procs)
        stats = fetch_stats(port, brief=True)
    finally:
        stop_site_process(site)
    result = _result(case, pages, stats, codes)
    if case == "join" and "late" in result.nodes:
        result.join_delay_seconds = result.nodes["late"]["first"] - started["late"]
    shutil.rmtree(workdir, ignore_errors=True)
    return result


def _result(case: str, pages: int, stats: dict[str, Any], codes: list[int | None]) -> BalanceResult:
    clients: dict[str, dict[str, Any]] = stats.get("clients", {})
    total = sum(int(c["requests"]) for c in clients.values()) or 1
    nodes: dict[str, dict[str, float]] = {}
    for label, c in clients.items():
        span = float(c["last"]) - float(c["first"])
        nodes[label] = {
            "requests": int(c["requests"]),
            "first": float(c["first"]),
            "last": float(c["last"]),
            "share": int(c["requests"]) / total,
            "rate": int(c["requests"]) / span if span > 0 else 0.0,
        }
    result = BalanceResult(
        case=case,
        pages=pages,
        seconds=float(stats["active_seconds"]),
        fetched_twice=len(stats["fetched_twice"]),
        never_fetched=len(stats["never_fetched"]),
        nodes=nodes,
        exit_codes=codes,
    )
    if case == "uneven" and {"fast", "slow"} <= nodes.keys():
        capacity = nodes["fast"]["rate"] + nodes["slow"]["rate"]
        result.ideal_seconds = int(stats["total_requests"]) / capacity if capacity else None
        result.slow_tail_seconds = nodes["slow"]["last"] - nodes["fast"]["last"]
    return result


def balance_targets(results: list[BalanceResult]) -> dict[str, bool]:
    """The issue's targets, named with what was measured."""
    targets: dict[str, bool] = {}
    for r in results:
        n = r.nodes
        targets[f"balance/{r.case}: nothing lost"] = r.never_fetched == 0
        if r.case == "equal" and n:
            shares = sorted(v["share"] for v in n.values())
            label = " / ".join(f"{s:.1%}" for s in shares)
            targets[f"balance/equal: each node 50% +/- 5% (measured {label})"] = len(
                shares
            ) == 2 and all(abs(s - 0.5) <= 0.05 for s in shares)
        if r.case == "uneven" and r.ideal_seconds:
            over = r.seconds / r.ideal_seconds - 1
            targets[f"balance/uneven: within 15% of the ideal split (measured {over:+.1%})"] = (
                over <= 0.15
            )
            tail = r.slow_tail_seconds or 0.0
            targets[f"balance/uneven: no backlog on the slow node (tail {tail:.2f}s)"] = tail < 1.0
        if r.case == "join":
            delay = r.join_delay_seconds
            targets[
                f"balance/join: the new node pulls within 5 s (measured "
                f"{'never' if delay is None else f'{delay:.1f}s'})"
            ] = delay is not None and delay <= 5
        if r.case in ("equal", "uneven", "join"):
            targets[f"balance/{r.case}: exact"] = r.fetched_twice == 0 and r.never_fetched == 0
    return targets
