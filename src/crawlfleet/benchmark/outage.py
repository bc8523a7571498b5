"""The store-outage trial, for ``crawlfleet bench`` (part ``faults``) and the test suite:
an item store that is down costs no re-crawl.

Two ``crawlfleet crawl`` nodes of one job crawl a fresh bundled site (latency-bound)
into PostgreSQL through a TCP proxy. Once some rows are stored the proxy is cut: the
store is down for ``outage_seconds``. ``kill_after_seconds`` into the outage one node is
killed (SIGKILL) and a replacement starts at once. Then the proxy is restored and the
crawl runs to its end. The site's own counters and the table must show: every page
stored once (``items_lost`` 0, ``duplicate_rows`` 0), and few fetches repeated
(``fetched_again``: the killed node's pages whose items were not stored yet, at most
``CRAWLFLEET_ITEMS_PENDING_MAX`` plus its requests in flight, ``CONCURRENT_REQUESTS``).
Without that bound the nodes would crawl on through the outage, holding every item,
and a kill would cost all the killed node's pages since the outage began.
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import redis
import sqlalchemy as sa

from crawlfleet.benchmark.crawl import kill_left
from crawlfleet.benchmark.faults import (
    NodeStarter,
    drop_table,
    fetched_pages,
    stored_urls,
    trial_settings,
)
from crawlfleet.node.backlog import WAITING_FOR_STORE
from crawlfleet.node.launcher import wait_all
from crawlfleet.redis.keys import JobKeys
from crawlfleet.redis.replies import node_statuses
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import TestSite
from crawlfleet.testsite.tcpproxy import TcpProxy

__all__ = ["OutageResult", "run_outage_trial"]

NODES = 2
POLL_SECONDS = 0.02
#: What a node's store logs once it is back (the count: every item that waited).
BACK_LINE = re.compile(r"is back after [0-9.]+ s; writing (\d+) waiting items")


@dataclass
class OutageResult:
    store: str  #: the SQL dialect written to
    pages: int
    rows: int
    outage_seconds: float
    kill_after_seconds: float
    #: CRAWLFLEET_ITEMS_PENDING_MAX and CONCURRENT_REQUESTS of the nodes
    pending_max: int
    concurrency: int
    #: the killed node's last status before the kill: pages in its engine (leased, not
    #: done) and items of its own waiting for the store
    victim_held: int
    victim_waiting: int
    victim_state: str
    #: pages fetched when the store went down, when the node was killed, when it came back
    fetched_at_down: int
    fetched_at_kill: int
    fetched_at_back: int
    never_fetched: int
    items_lost: int
    duplicate_rows: int
    #: fetches of a page fetched before (every fetch beyond the first of each page)
    fetched_again: int
    #: the items each node's store said it was writing when the store was back
    recovery_counts: list[int] = field(default_factory=list)
    #: node logs that said the node was waiting for the item store
    nodes_waited: int = 0
    seconds: float = 0.0
    #: the killed node's exit code (-9), then the others'
    exit_codes: list[int | None] = field(default_factory=list)

    @property
    def refetch_bound(self) -> int:
        """The most pages the killed node may cost again: its unstored work plus what
        it had in flight when it reached the bound (downloading: CONCURRENT_REQUESTS at
        most; as many again allowed for responses being parsed)."""
        return self.pending_max + 2 * self.concurrency

    @property
    def ok(self) -> bool:
        finished = all(code == 0 for code in self.exit_codes[1:])
        clean = not (self.never_fetched or self.items_lost or self.duplicate_rows)
        return finished and clean and self.fetched_again <= self.refetch_bound

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "refetch_bound": self.refetch_bound, "ok": self.ok}


def run_outage_trial(
    *,
    postgres_url: str,
    redis_url: str,
    workdir: Path,
    key_prefix: str = "cfbench",
    pages: int = 1500,
    latency: float = 0.05,
    concurrency: int = 8,
    pending_max: int = 200,
    outage_seconds: float = 30.0,
    kill_after_seconds: float = 15.0,
    timeout: float = 300,
) -> OutageResult:
    """Run one trial (see the module docstring) storing into *postgres_url* through a
    proxy; node logs and data dirs in *workdir*. The job (under *key_prefix*) and the
    table are the trial's own; the table is dropped afterwards."""
    real = sa.engine.make_url(postgres_url)
    proxy = TcpProxy(real.host or "127.0.0.1", real.port or 5432)
    proxy.start()
    via_proxy = real.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    tag = uuid.uuid4().hex[:8]
    table = f"cf_outage_{tag}"
    workdir.mkdir(parents=True, exist_ok=True)
    settings = trial_settings(key_prefix, workdir, concurrency, via_proxy, table)
    settings["CRAWLFLEET_STORE_RETRY_MIN_SECONDS"] = 0.2
    settings["CRAWLFLEET_STORE_RETRY_MAX_SECONDS"] = 1
    settings["CRAWLFLEET_ITEMS_PENDING_MAX"] = pending_max
    model = SiteModel(pages=pages, hosts=3, problems=False)
    started = time.monotonic()
    node = NodeStarter(f"outage-{tag}", redis_url, workdir, settings)

    with TestSite(model, latency_seconds=latency, timeout_seconds=10) as site:
        node.seeds = site.seed_urls
        procs = [node() for _ in range(NODES)]
        victim: subprocess.Popen[bytes] | None = None
        try:
            deadline = time.monotonic() + timeout
            # the store goes down once a tenth of the site is stored
            while len(stored_urls(postgres_url, table)) < pages // 10:
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise RuntimeError(f"the crawl did not get going: see {workdir}/node*.log")
                time.sleep(POLL_SECONDS)
            proxy.stop()
            down_at, fetched_at_down = time.monotonic(), fetched_pages(site)
            time.sleep(kill_after_seconds)
            victim = procs.pop(0)
            last = _status_of(redis_url, JobKeys.of(key_prefix, f"outage-{tag}"), victim.pid)
            victim.kill()
            fetched_at_kill = fetched_pages(site)
            procs.append(node())
            time.sleep(max(0.0, down_at + outage_seconds - time.monotonic()))
            fetched_at_back = fetched_pages(site)
            proxy.start()
            victim_code = wait_all([victim], 30)[0]
            codes = wait_all(procs, max(1.0, deadline - time.monotonic()))
            stats = site.stats(brief=True)
            urls = stored_urls(postgres_url, table)
        finally:
            kill_left([*procs, *([victim] if victim is not None else [])])
            proxy.stop()
            drop_table(postgres_url, table)
        expected = {site.url(n) for n in range(pages)}
    logs = [path.read_text(errors="replace") for path in sorted(workdir.glob("node*.log"))]
    return OutageResult(
        store=real.get_backend_name(),
        pages=pages,
        rows=len(urls),
        outage_seconds=outage_seconds,
        kill_after_seconds=kill_after_seconds,
        pending_max=pending_max,
        concurrency=concurrency,
        victim_held=int(last.get("in_progress", -1)),
        victim_waiting=int(last.get("items_waiting", -1)),
        victim_state=str(last.get("state", "?")),
        fetched_at_down=fetched_at_down,
        fetched_at_kill=fetched_at_kill,
        fetched_at_back=fetched_at_back,
        never_fetched=len(stats.get("never_fetched", [])),
        items_lost=len(expected - set(urls)),
        duplicate_rows=len(urls) - len(set(urls)),
        fetched_again=int(stats["content_requests"]) - int(stats["content_fetched"]),
        recovery_counts=[int(n) for text in logs for n in BACK_LINE.findall(text)],
        nodes_waited=sum(1 for text in logs if WAITING_FOR_STORE in text),
        seconds=round(time.monotonic() - started, 2),
        exit_codes=[victim_code, *codes],
    )


def _status_of(redis_url: str, keys: JobKeys, pid: int) -> dict[str, Any]:
    """The last status node process *pid* published ({} if none)."""
    client = redis.Redis.from_url(redis_url)
    try:
        raw: dict[bytes, bytes] = client.hgetall(keys.nodeinfo)  # type: ignore[assignment]
    finally:
        client.close()
    for status in node_statuses(raw).values():
        if status.get("pid") == pid:
            return status
    return {}
