"""The ``real`` part of ``crawlfleet bench``: vanilla Scrapy, then N crawlfleet nodes,
crawl the same real site (Java's API docs served on loopback by the shared
realsites.sh, say) with :class:`~crawlfleet.benchmark.linkspider.LinkSpider`: every
page of the start URL's origin, or under the given URL prefixes. With a rate limit,
both crawl at that many requests a second: vanilla with ``DOWNLOAD_DELAY`` = 1/rate
(one download slot for the site: one host), the nodes with ``CRAWLFLEET_RATE_LIMITS``
``{"*": "<rate>/1s"}``, one budget across the fleet.

Measured for each: the wall time from launch to the last process's exit (start-up and
close included: what a user waits for; the nodes close as they do by default, the job
finished for ``CRAWLFLEET_FINISH_GRACE_SECONDS``), the CPU of its processes (user + system, as
the kernel counted them at exit; the nodes' Redis is not counted: it runs apart, on a
Redis of the run's own, and ``redis-cpu`` measures it), the pages (distinct URLs of its
items) and those fetched more than once, when the first and the last response came
after launch, and the most responses answered in any 1-s window (the items' ``at``,
when each response's headers arrived: near the server's own count, not equal to it).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crawlfleet.benchmark.crawl import (
    crawl_settings,
    kill_left,
    start_vanilla,
    wait_measured,
)
from crawlfleet.benchmark.linkspider import LINK_SPIDER, read_link_items
from crawlfleet.benchmark.scale import private_redis
from crawlfleet.node.launcher import numbered, start_node

__all__ = ["RealSiteResult", "most_in_window", "run_real_site"]

KEY_PREFIX = "cfbench"


@dataclass
class RealSiteResult:
    """One crawl of a real site by vanilla Scrapy (*contender* "scrapy", one process) or
    by *nodes* crawlfleet nodes ("crawlfleet"), at *rate* requests a second (0: no
    limit)."""

    site: str
    contender: str
    nodes: int
    rate: int
    pages: int = 0
    fetched_twice: int = 0
    #: launch to the last process's exit
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    #: launch to the first response, and to the last
    first_seconds: float = 0.0
    last_seconds: float = 0.0
    #: the most responses answered in any 1-s window
    most_in_second: int = 0
    #: requests of the nodes given back for a send time they missed (their slots lost)
    late: int = 0
    exit_codes: list[int | None] = field(default_factory=list)
    #: the URLs fetched (not in the JSON report: thousands)
    urls: list[str] = field(default_factory=list, repr=False)

    @property
    def cpu_ms_per_page(self) -> float:
        return self.cpu_seconds * 1000 / self.pages if self.pages else 0.0

    @property
    def bound_seconds(self) -> float:
        """The least time the pages take at the rate limit (0: no limit)."""
        return self.pages / self.rate if self.rate else 0.0

    @property
    def measured(self) -> bool:
        """It crawled something, and every process ended on its own with exit code 0."""
        return self.pages > 0 and bool(self.exit_codes) and all(c == 0 for c in self.exit_codes)

    def as_dict(self) -> dict[str, Any]:
        figures = asdict(self)
        del figures["urls"]
        figures["cpu_ms_per_page"] = round(self.cpu_ms_per_page, 3)
        figures["bound_seconds"] = round(self.bound_seconds, 2)
        return figures


def most_in_window(times: list[float], window: float = 1.0) -> int:
    """The most of *times* (seconds) within any span shorter than *window*."""
    ordered = sorted(times)
    most, start = 0, 0
    for end, t in enumerate(ordered):
        while t - ordered[start] >= window:
            start += 1
        most = max(most, end - start + 1)
    return most


def run_real_site(
    url: str,
    contender: str,
    *,
    nodes: int = 4,
    rate: int = 0,
    prefixes: str = "",
    concurrency: int = 16,
    server: str | None = None,
    timeout: float = 1800,
    node_settings: dict[str, Any] | None = None,
    forked: bool = True,
) -> RealSiteResult:
    """One crawl of the site from *url* (only under *prefixes*, comma-separated URL
    prefixes, when given) by *contender*: "scrapy" (one vanilla process) or
    "crawlfleet" (*nodes* nodes of one job on a Redis of their own, *server* the
    redis-server binary), *concurrency* requests at a time per process, at *rate*
    requests a second when not 0; *node_settings* go to the nodes besides (a setting
    compared by hand). *forked*: the nodes are one ``crawlfleet crawl --processes``
    command (forked once imported), else one command each."""
    if contender not in ("scrapy", "crawlfleet"):
        raise ValueError(f"contender must be scrapy or crawlfleet, not {contender!r}")
    workdir = Path(tempfile.mkdtemp(prefix="crawlfleet-real-"))
    result = RealSiteResult(url, contender, nodes if contender == "crawlfleet" else 1, rate)
    settings = crawl_settings(concurrency)
    spider_args = {"prefixes": prefixes} if prefixes else {}
    try:
        if contender == "scrapy":
            outputs = [workdir / "items0.jsonl"]
            if rate:
                settings.update(DOWNLOAD_DELAY=1 / rate, RANDOMIZE_DOWNLOAD_DELAY=False)
            feeds = {str(outputs[0]): {"format": "jsonlines"}}
            launched = time.time()
            procs = [
                start_vanilla(
                    url,
                    {**settings, "FEEDS": json.dumps(feeds)},
                    workdir,
                    spider=LINK_SPIDER,
                    spider_args=spider_args,
                )
            ]
            codes, cpu = wait_measured(procs, timeout)
            ended = time.time()
            kill_left(procs)
        else:
            if rate:
                settings["CRAWLFLEET_RATE_LIMITS"] = json.dumps({"*": f"{rate}/1s"})
            commands = 1 if forked else nodes
            with private_redis(server) as redis_url:
                job = f"real-{int(time.time() * 1000)}"
                launched = time.time()
                procs = [
                    start_node(
                        LINK_SPIDER,
                        job=job,
                        redis_url=redis_url,
                        log=workdir / f"node{i}.log",
                        spider_args={"start_urls": url, **spider_args},
                        output=_node_files(workdir, "items.jsonl", commands, commands)[i],
                        settings={
                            **settings,
                            "CRAWLFLEET_ITEM_STAGES": "",
                            "CRAWLFLEET_KEY_PREFIX": KEY_PREFIX,
                            "CRAWLFLEET_STATS_FILE": str(
                                _node_files(workdir, "stats.json", commands, commands)[i]
                            ),
                            **(node_settings or {}),
                        },
                        processes=nodes // commands,
                    )
                    for i in range(commands)
                ]
                codes, cpu = wait_measured(procs, timeout)
                ended = time.time()  # the last exit: not the run's Redis stopping after
                kill_left(procs)
            outputs = _node_files(workdir, "items.jsonl", nodes, commands)
            stats = [
                json.loads(f.read_text(encoding="utf-8")) if f.exists() else {}
                for f in _node_files(workdir, "stats.json", nodes, commands)
            ]
            result.late = sum(int(s.get("crawlfleet/scheduler/late", 0)) for s in stats)
        result.seconds = round(ended - launched, 2)
        result.cpu_seconds = round(cpu, 2)
        result.exit_codes = codes
        _read_items(result, outputs, launched)
        return result
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _node_files(workdir: Path, name: str, nodes: int, commands: int) -> list[Path]:
    """The files called *name* of *nodes* nodes started as *commands* commands: one
    each (``items0.jsonl``...), or all from one (numbered from 1, as ``crawlfleet crawl
    --processes`` numbers them; one node alone: *name* itself)."""
    if commands > 1:
        stem, _, suffix = name.partition(".")
        return [workdir / f"{stem}{i}.{suffix}" for i in range(nodes)]
    if nodes == 1:
        return [workdir / name]
    return [workdir / numbered(name, i) for i in range(1, nodes + 1)]


def _read_items(result: RealSiteResult, outputs: list[Path], launched: float) -> None:
    """The pages, the pages fetched twice and the response times of *result*'s items."""
    urls, answered = read_link_items(outputs)
    times = [at - launched for at in answered]
    result.urls = sorted(set(urls))
    result.pages = len(result.urls)
    result.fetched_twice = sum(1 for n in Counter(urls).values() if n > 1)
    if times:
        result.first_seconds = round(min(times), 2)
        result.last_seconds = round(max(times), 2)
        result.most_in_second = most_in_window(times)
