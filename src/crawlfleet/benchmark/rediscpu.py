"""The ``redis-cpu`` part of ``crawlfleet bench``: Redis's main-thread CPU per crawled page
on a site whose pages repeat navigation links, as real sites do, with the nodes' local
seen cache on and off.

Each run starts a Redis of its own (127.0.0.1, nothing written to disk: no other user's
traffic in the figures), then crawls with N nodes of one job, started paused and
resumed together once all have joined, either

- the bundled test site with ``menu_pages`` extra menu links (each page carries
  ``2 + menu_pages`` navigation links besides its body links), with the test-site
  spider; the site tells which pages were fetched twice or never; or
- any site (``site_url``: a real one, e.g. Java's API docs served on loopback by the
  shared realsites.sh), with :class:`~crawlfleet.benchmark.linkspider.LinkSpider`,
  every page of the start URL's origin; the nodes' items (one per response) tell the
  URLs fetched, and which were fetched more than once.

Redis CPU is its main thread's ``INFO cpu`` (user + system) from the resume to the end
of the last node (closing included), over the pages crawled (responses received by the
nodes); of it, what the same Redis spends idle over as long (its own timers, measured
for IDLE_SECONDS before the nodes start) is reported apart; script calls are ``INFO
commandstats`` over the same span (``CONFIG RESETSTAT`` at the resume). The cache's hit
rate is the nodes' own count (``crawlfleet/seen_cache/hits`` over ``/lookups``).
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crawlfleet.benchmark.crawl import (
    JOIN_SECONDS,
    crawl_settings,
    kill_left,
    read_node_stats,
    wait_measured,
)
from crawlfleet.benchmark.linkspider import LINK_SPIDER, read_link_items
from crawlfleet.benchmark.scale import cpu_us, private_redis
from crawlfleet.frontier.client import Frontier
from crawlfleet.node.launcher import start_node
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.redis.replies import text
from crawlfleet.redis.scripts import ScriptSet, script_source
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.process import fetch_stats, start_site_process, stop_site_process

__all__ = ["RedisCpuResult", "run_redis_cpu"]

TESTSITE_SPIDER = "crawlfleet.testsite.spider:TestSiteSpider"
KEY_PREFIX = "cfbench"
#: Script commands counted as script calls in ``INFO commandstats``.
SCRIPT_COMMANDS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")
#: Calls the slow log keeps when profiling (more than a run makes).
SLOWLOG_MAX = 10_000_000
#: How long Redis's idle CPU is measured before each crawl.
IDLE_SECONDS = 2.0
#: How long reading the slow log may take (a crawl of 10,000 pages logs some 200,000
#: calls).
SLOWLOG_READ_SECONDS = 120


@dataclass
class RedisCpuResult:
    site: str
    nodes: int
    #: CRAWLFLEET_SEEN_CACHE_SIZE of the nodes (0: no local cache)
    cache_size: int
    pages: int  #: responses the nodes received
    seconds: float  #: from the resume to the end of the last node
    redis_cpu_seconds: float
    redis_us_per_page: float
    script_calls_per_page: float
    #: of redis_us_per_page, what the same Redis spent idle (its own timers, no client)
    #: over as long, measured just before the nodes started: a cost per second, not
    #: per page (a faster crawl spreads it thinner)
    idle_us_per_page: float = 0.0
    #: every command Redis ran (scripts' own commands included), calls per page
    calls_per_page: dict[str, float] = field(default_factory=dict)
    #: µs per page spent in each command (a script's own included in its line)
    us_per_page_by_command: dict[str, float] = field(default_factory=dict)
    #: with *profile*: per script, calls and µs per page (``SLOWLOG``, every call)
    calls_per_page_by_script: dict[str, float] = field(default_factory=dict)
    us_per_page_by_script: dict[str, float] = field(default_factory=dict)
    cache_lookups: int = 0
    cache_hits: int = 0
    #: requests sent to the frontier, and found duplicates there (its counters)
    enqueued: int = 0
    duplicates: int = 0
    fetched_twice: int = 0
    #: leases the nodes returned to their queues (expired, or of a node taken for
    #: dead): what a lease expiry re-issues may be fetched twice
    reclaimed: int = 0
    #: the test site: pages never fetched (-1: unknown, any other site)
    never_fetched: int = -1
    exit_codes: list[int | None] = field(default_factory=list)
    #: the URLs fetched (any other site than the test site), for a comparison with a
    #: list of the site's pages; left out of the JSON
    urls: list[str] = field(default_factory=list, repr=False)

    @property
    def hit_rate(self) -> float:
        return self.cache_hits / self.cache_lookups if self.cache_lookups else 0.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("urls")
        out["cache_hit_rate"] = round(self.hit_rate, 4)
        return out


def run_redis_cpu(
    *,
    cache_size: int,
    nodes: int = 4,
    pages: int = 2000,
    menu_pages: int = 18,
    site_url: str = "",
    server: str | None = None,
    concurrency: int = 16,
    settings: dict[str, Any] | None = None,
    timeout: float = 1800,
    profile: bool = False,
) -> RedisCpuResult:
    """One crawl by *nodes* nodes with CRAWLFLEET_SEEN_CACHE_SIZE = *cache_size*, on a
    Redis of its own (*server*: the redis-server binary): of the test site (*pages*
    pages over 4 hosts, *menu_pages* extra menu links) or, with *site_url*, of that
    site. With *profile*, every call's time is logged (``SLOWLOG``, which costs some
    CPU of its own) and summed by script."""
    workdir = Path(tempfile.mkdtemp(prefix="crawlfleet-redis-cpu-"))
    site: subprocess.Popen[bytes] | None = None
    port = 0
    try:
        if site_url:
            spider, seeds, name = LINK_SPIDER, site_url, site_url
        else:
            model = SiteModel(pages=pages, hosts=4, problems=False, menu_pages=menu_pages)
            site, port = start_site_process(model, stderr=subprocess.DEVNULL)
            spider, seeds = TESTSITE_SPIDER, ",".join(model.seed_urls(port))
            name = f"test site: {pages} pages, {2 + menu_pages} nav links each"
        with private_redis(server) as redis_url:
            idle_per_second = asyncio.run(_idle_cpu(redis_url))
            job = f"redis-cpu-{int(time.time() * 1000)}"
            asyncio.run(_control(redis_url, job, "paused"))
            procs = [
                start_node(
                    spider,
                    job=job,
                    redis_url=redis_url,
                    log=workdir / f"node{i}.log",
                    spider_args={"start_urls": seeds},
                    output=workdir / f"items{i}.jsonl" if site_url else None,
                    settings={
                        **crawl_settings(concurrency),
                        "CRAWLFLEET_ITEM_STAGES": "",
                        "CRAWLFLEET_KEY_PREFIX": KEY_PREFIX,
                        "CRAWLFLEET_STATS_FILE": str(workdir / f"stats{i}.json"),
                        "CRAWLFLEET_FINISH_GRACE_SECONDS": 0.5,
                        "CRAWLFLEET_SEEN_CACHE_SIZE": cache_size,
                        **(settings or {}),
                    },
                )
                for i in range(nodes)
            ]
            before = asyncio.run(
                _control(redis_url, job, "running", wait_nodes=nodes, profile=profile)
            )
            started = time.monotonic()
            codes, _cpu = wait_measured(procs, timeout)
            seconds = time.monotonic() - started
            kill_left(procs)
            after, stats, counters, slow = asyncio.run(_read_redis(redis_url, job, profile))
        node_stats = read_node_stats(workdir, nodes)
        crawled = sum(int(s.get("response_received_count", 0)) for s in node_stats)
        scripts = sum(stats.get(c, {}).get("calls", 0) for c in SCRIPT_COMMANDS)
        per_page = max(crawled, 1)
        spent = (after - before) / 1e6
        result = RedisCpuResult(
            site=name,
            nodes=nodes,
            cache_size=cache_size,
            pages=crawled,
            seconds=round(seconds, 2),
            redis_cpu_seconds=round(spent, 3),
            redis_us_per_page=round(spent * 1e6 / per_page, 1),
            script_calls_per_page=round(scripts / per_page, 3),
            idle_us_per_page=round(idle_per_second * seconds / per_page, 1),
            calls_per_page={c: round(s["calls"] / per_page, 3) for c, s in sorted(stats.items())},
            us_per_page_by_command={
                c: round(s["usec"] / per_page, 1) for c, s in sorted(stats.items())
            },
            calls_per_page_by_script={
                name: round(calls / per_page, 3) for name, (calls, _us) in sorted(slow.items())
            },
            us_per_page_by_script={
                name: round(us / per_page, 1) for name, (_calls, us) in sorted(slow.items())
            },
            cache_lookups=sum(int(s.get("crawlfleet/seen_cache/lookups", 0)) for s in node_stats),
            cache_hits=sum(int(s.get("crawlfleet/seen_cache/hits", 0)) for s in node_stats),
            reclaimed=sum(int(s.get("crawlfleet/frontier/reclaimed", 0)) for s in node_stats),
            enqueued=int(counters.get("enqueued", 0)),
            duplicates=int(counters.get("duplicates", 0)),
            exit_codes=codes,
        )
        if site_url:
            urls, _ = read_link_items([workdir / f"items{i}.jsonl" for i in range(nodes)])
            result.urls = sorted(set(urls))
            result.fetched_twice = sum(1 for n in Counter(urls).values() if n > 1)
        else:
            site_stats = fetch_stats(port, brief=True)
            result.fetched_twice = len(site_stats["fetched_twice"])
            result.never_fetched = len(site_stats["never_fetched"])
        return result
    finally:
        if site is not None:
            stop_site_process(site)
        shutil.rmtree(workdir, ignore_errors=True)


async def _idle_cpu(redis_url: str) -> float:
    """Redis's main-thread CPU µs per second over IDLE_SECONDS with nothing to do."""
    client = make_client(redis_url)
    try:
        before = cpu_us(await client.info("cpu"))
        await asyncio.sleep(IDLE_SECONDS)
        return (cpu_us(await client.info("cpu")) - before) / IDLE_SECONDS
    finally:
        await client.aclose()


async def _control(
    redis_url: str, job: str, state: str, *, wait_nodes: int = 0, profile: bool = False
) -> float:
    """Set *job*'s nodes to *state* once *wait_nodes* have joined; Redis's main-thread
    CPU µs just before (its command statistics reset; with *profile*, every call logged
    from then on)."""
    client = make_client(redis_url)
    try:
        keys = JobKeys.of(KEY_PREFIX, job)
        deadline = time.monotonic() + JOIN_SECONDS
        while await client.zcard(keys.nodes) < wait_nodes and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await client.config_resetstat()
        if profile:
            await client.slowlog_reset()
            await client.config_set("slowlog-max-len", SLOWLOG_MAX)
            await client.config_set("slowlog-log-slower-than", 0)
        spent = cpu_us(await client.info("cpu"))
        await Frontier(client, keys).send_control("*", "state", state)
        return spent
    finally:
        await client.aclose()


async def _read_redis(
    redis_url: str, job: str, profile: bool
) -> tuple[float, dict[str, dict[str, Any]], dict[str, int], dict[str, tuple[int, int]]]:
    """Redis's main-thread CPU µs so far, its command statistics (command -> calls,
    usec), *job*'s counters, and with *profile* the calls and µs by script (other
    commands by name) from its slow log (a long read: SLOWLOG_READ_SECONDS)."""
    client = make_client(redis_url, socket_timeout=SLOWLOG_READ_SECONDS)
    try:
        spent = cpu_us(await client.info("cpu"))
        if profile:
            await client.config_set("slowlog-log-slower-than", -1)
        raw = await client.info("commandstats")
        stats = {name.removeprefix("cmdstat_"): value for name, value in raw.items()}
        counters = await Frontier(client, JobKeys.of(KEY_PREFIX, job)).counters()
        slow: dict[str, tuple[int, int]] = {}
        if profile:
            names = {
                hashlib.sha1(script_source(name, "exact").encode()).hexdigest(): name
                for name in ScriptSet.NAMES
            }
            for entry in await client.slowlog_get(-1):
                words = text(entry["command"]).split()
                name = words[0].lower() if words else "?"
                if name == "evalsha" and len(words) > 1:
                    name = names.get(words[1], words[1][:8])
                calls, us = slow.get(name, (0, 0))
                slow[name] = (calls + 1, us + int(entry["duration"]))
        return spent, stats, counters, slow
    finally:
        await client.aclose()
