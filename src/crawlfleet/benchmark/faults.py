"""Fault trials for ``crawlfleet bench`` and the test suite: nodes that store items in a
real SQL database are killed at random moments, and nothing may be lost.

One trial: a fresh bundled site (latency-bound, so the crawl lasts a few seconds), three
``crawlfleet crawl`` nodes of one job running the site's spider spec with the SQL store.
At a random moment while pages are being fetched, one node is hit by the trial's fault:

- ``kill``: SIGKILL;
- ``interrupt``: a double Ctrl-C (the second SIGINT 2-30 ms after the node logged the
  first: it forces Scrapy's unclean shutdown while the graceful stop is under way).

A replacement node starts at once and the crawl runs to its end. Then the site's own
counters and the table must show: every page fetched (``never_fetched`` 0), one row per
page (``items_lost`` 0: pages with no row), and no key twice (``duplicate_rows`` 0, also
guaranteed by the table's primary key, so counted from the URLs). Pages fetched twice
are allowed (the killed node's requests in flight) and reported.
"""

from __future__ import annotations

import random
import signal
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from crawlfleet.benchmark.crawl import kill_left
from crawlfleet.node.launcher import start_node, wait_all
from crawlfleet.pipelines.sql import items_table
from crawlfleet.testsite import model as site_model
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import TestSite

__all__ = [
    "FAULTS",
    "FaultResult",
    "NodeStarter",
    "drop_table",
    "fetched_pages",
    "run_fault_trial",
    "stored_urls",
    "trial_settings",
]

FAULTS = ("kill", "interrupt")
#: What Scrapy logs on the first Ctrl-C.
GRACEFUL_LINE = "shutting down gracefully"
SPEC = Path(site_model.__file__).resolve().parent / "spec.yaml"
NODES = 3
POLL_SECONDS = 0.02


@dataclass
class FaultResult:
    fault: str
    store: str  #: the SQL dialect written to
    pages: int
    rows: int
    #: pages fetched when the fault hit
    hit_at: int
    never_fetched: int
    items_lost: int
    duplicate_rows: int
    fetched_twice: int
    seconds: float
    #: the faulted node's exit code (-9 for SIGKILL), then the others'
    exit_codes: list[int | None] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        finished = all(code == 0 for code in self.exit_codes[1:])
        return finished and not (self.never_fetched or self.items_lost or self.duplicate_rows)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def fetched_pages(site: TestSite) -> int:
    """Content pages of *site* fetched at least once."""
    return int(site.stats(brief=True)["content_fetched"])


def stored_urls(sql_url: str, table: str) -> list[str | None]:
    """The URL of every row of *table* ([] before it exists)."""
    engine = sa.create_engine(sql_url, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            return [row[0] for row in conn.execute(sa.select(items_table(table).c.url))]
    except sa.exc.DBAPIError:
        return []  # not created yet
    finally:
        engine.dispose()


def drop_table(sql_url: str, table: str) -> None:
    """Drop the items table *table* if it exists."""
    engine = sa.create_engine(sql_url, poolclass=sa.NullPool)
    try:
        items_table(table).drop(engine, checkfirst=True)
    finally:
        engine.dispose()


def trial_settings(
    key_prefix: str, workdir: Path, concurrency: int, sql_url: str, table: str
) -> dict[str, Any]:
    """The settings of a trial's nodes: quick heartbeats and reclaims, storing into
    *table* of *sql_url*, state under *workdir*."""
    return {
        "CRAWLFLEET_KEY_PREFIX": key_prefix,
        "CRAWLFLEET_DATA_DIR": str(workdir / "data"),
        "CONCURRENT_REQUESTS": concurrency,
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False,
        "CRAWLFLEET_HEARTBEAT_SECONDS": 0.5,
        "CRAWLFLEET_RECLAIM_SECONDS": 0.5,
        "CRAWLFLEET_NODE_TIMEOUT_SECONDS": 2,
        "CRAWLFLEET_FINISH_GRACE_SECONDS": 1,
        "CRAWLFLEET_STORES": "sql",
        "CRAWLFLEET_SQL_URL": sql_url,
        "CRAWLFLEET_SQL_TABLE": table,
    }


class NodeStarter:
    """Starts the trial's nodes of *job* (``crawlfleet crawl`` of the bundled site's
    spec from ``seeds``), each logging to ``nodeN.log`` in *workdir*."""

    def __init__(self, job: str, redis_url: str, workdir: Path, settings: dict[str, Any]):
        self.job, self.redis_url, self.workdir, self.settings = job, redis_url, workdir, settings
        self.seeds: list[str] = []
        self.count = 0

    def __call__(self) -> subprocess.Popen[bytes]:
        self.count += 1
        return start_node(
            str(SPEC),
            job=self.job,
            redis_url=self.redis_url,
            log=self.workdir / f"node{self.count}.log",
            spider_args={"start_urls": ",".join(self.seeds)},
            settings=self.settings,
        )


def run_fault_trial(
    fault: str,
    *,
    sql_url: str,
    redis_url: str,
    workdir: Path,
    key_prefix: str = "cfbench",
    pages: int = 300,
    latency: float = 0.05,
    concurrency: int = 8,
    seed: int | None = None,
    timeout: float = 180,
) -> FaultResult:
    """Run one trial (see the module docstring) in *workdir* (node logs, data dir) and
    return its figures. The job (under *key_prefix*) and the table are the trial's own;
    the table is dropped afterwards."""
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r} (one of {', '.join(FAULTS)})")
    rng = random.Random(seed)
    tag = uuid.uuid4().hex[:8]
    table = f"cf_fault_{tag}"
    workdir.mkdir(parents=True, exist_ok=True)
    settings = trial_settings(key_prefix, workdir, concurrency, sql_url, table)
    model = SiteModel(pages=pages, hosts=3, problems=False)
    started = time.monotonic()
    node = NodeStarter(f"faults-{tag}", redis_url, workdir, settings)

    with TestSite(model, latency_seconds=latency, timeout_seconds=10) as site:
        node.seeds = site.seed_urls
        procs = [node() for _ in range(NODES)]
        try:
            # the fault hits somewhere in the middle 80 % of the crawl
            hit_at = rng.randint(pages // 10, pages * 9 // 10)
            deadline = time.monotonic() + timeout
            while fetched_pages(site) < hit_at and time.monotonic() < deadline:
                if all(p.poll() is not None for p in procs):
                    break
                time.sleep(POLL_SECONDS)
            hit_at = fetched_pages(site)
            index = rng.randrange(len(procs))
            victim = procs.pop(index)
            if fault == "kill":
                victim.kill()
            else:
                victim.send_signal(signal.SIGINT)
                # the second one while the graceful stop is under way: once the node has
                # seen the first (two signals before it runs would reach it as one)
                _wait_for_line(workdir / f"node{index + 1}.log", GRACEFUL_LINE, 5.0)
                time.sleep(rng.uniform(0.002, 0.03))
                victim.send_signal(signal.SIGINT)
            procs.append(node())
            victim_code = wait_all([victim], 30)[0]
            codes = wait_all(procs, max(1.0, deadline - time.monotonic()))
            stats = site.stats(brief=True)
            urls = stored_urls(sql_url, table)
        finally:
            kill_left(procs)
            drop_table(sql_url, table)
        expected = {site.url(n) for n in range(pages)}
    return FaultResult(
        fault=fault,
        store=sa.engine.make_url(sql_url).get_backend_name(),
        pages=pages,
        rows=len(urls),
        hit_at=hit_at,
        never_fetched=len(stats.get("never_fetched", [])),
        items_lost=len(expected - set(urls)),
        duplicate_rows=len(urls) - len(set(urls)),
        fetched_twice=len(stats.get("fetched_twice", [])),
        seconds=round(time.monotonic() - started, 2),
        exit_codes=[victim_code, *codes],
    )


def _wait_for_line(log: Path, text: str, seconds: float) -> bool:
    """Whether *text* appears in *log* within *seconds*."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return True
        time.sleep(0.005)
    return False
