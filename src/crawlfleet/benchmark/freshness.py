"""The freshness scenario of ``crawlfleet bench --only freshness``: a continuous job
keeps a changing site's copy fresh, once with a fixed revisit interval and once with the
adaptive policy, and the site says what it saw.

The site (``crawlfleet site --changing``, :mod:`crawlfleet.testsite.changing`) has four
classes of content pages in equal shares: ``minute`` pages change every 60 site seconds,
``hourly`` ones every hour, ``never`` ones never, ``stamp`` ones only in their
``updated_at`` field (which every crawl here leaves out of the change fingerprint:
CRAWLFLEET_REVISIT_IGNORE_FIELDS); half of each class sends ETag and Last-Modified. Its
clock runs *time_scale* times faster than the real one, so a run of minutes sees hours.

Per policy: a fresh site, N nodes of one job crawling it from its roots under one
fleet-wide budget, a warm-up (every page found and visited at least once, the adaptive
intervals settling), then the site's counters are reset and the measured window begins;
at its end the site's figures are read (changes picked up within twice their interval,
fetches of unchanged pages, 304s), and the job's change stream (the new item versions
the nodes found in the window, by page class: ``stamp`` pages must have none).

The fixed interval is half the ``minute`` pages' change interval (what it takes to pick
up their changes in time); the adaptive policy starts there and may go from a quarter
of it to the length of the measured window.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import redis

from crawlfleet.benchmark.crawl import kill_left
from crawlfleet.frontier.records import counter_value
from crawlfleet.node.launcher import start_node, wait_all
from crawlfleet.redis.keys import JobKeys
from crawlfleet.redis.replies import text
from crawlfleet.testsite.changelog import ChangeCounts
from crawlfleet.testsite.changing import INTERVALS, Changing, Schedule
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.process import (
    fetch_change_stats,
    reset_stats,
    start_site_process,
    stop_site_process,
)
from crawlfleet.testsite.server import CLIENT_HEADER

__all__ = ["POLICIES", "FreshnessResult", "run_freshness"]

#: The policies compared, in order.
POLICIES = ("fixed", "adaptive")
#: The spider: the test site's, which extracts every field of a page (updated_at too).
SPIDER = "crawlfleet.testsite.spider:TestSiteSpider"
#: The label every node sends the site (one client: "unchanged" is judged per client).
CLIENT = "freshness"


@dataclass
class FreshnessResult:
    policy: str
    nodes: int
    pages: int
    time_scale: float
    rate_limit: int  #: the site's fleet-wide budget, requests/s
    interval_s: float  #: the fixed interval, and the adaptive policy's first one
    warmup_s: float
    seconds: float  #: the measured window (real seconds)
    #: the site's figures over the window, in all and by page class
    total: dict[str, Any] = field(default_factory=dict)
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: 304s among the fetches of the pages that send validators
    validators_304_share: float | None = None
    #: new item versions the nodes found in the window, by page class
    versions: dict[str, int] = field(default_factory=dict)
    #: the job's counters at the end (tracked, revisits, changes, ...)
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def on_time_share(self) -> float | None:
        """Changes due in the window picked up within twice their interval."""
        share = self.total.get("on_time_share")
        return None if share is None else float(share)

    @property
    def unchanged_per_second(self) -> float:
        return float(self.total.get("unchanged_fetches", 0)) / self.seconds

    @property
    def fetches_per_second(self) -> float:
        return float(self.total.get("fetches", 0)) / self.seconds

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "on_time_share": self.on_time_share,
            "unchanged_per_second": self.unchanged_per_second,
            "fetches_per_second": self.fetches_per_second,
        }


def run_freshness(
    policy: str,
    *,
    redis_url: str,
    key_prefix: str,
    nodes: int = 2,
    pages: int = 40,
    time_scale: float = 20.0,
    warmup: float = 60.0,
    seconds: float = 120.0,
) -> FreshnessResult:
    """One run of *policy* ("fixed" or "adaptive"; see the module docstring)."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    changing = Changing(time_scale=time_scale, validators=0.5)
    model = SiteModel(pages=pages, hosts=1, problems=False)
    schedule = Schedule(model, changing)
    change_s = INTERVALS["minute"] / time_scale  # real seconds between two versions
    interval = change_s / 2
    # every page at the fixed interval, twice over (discovery, catalog pages, retries)
    rate = math.ceil(2 * (pages + pages // 10 + 2) / interval)
    workdir = Path(tempfile.mkdtemp(prefix="crawlfleet-fresh-"))
    site, port = start_site_process(model, changing=changing, stderr=subprocess.DEVNULL)
    job = f"fresh-{policy}-{int(time.time() * 1000)}"
    keys = JobKeys.of(key_prefix, job)
    settings: dict[str, Any] = {
        "CRAWLFLEET_KEY_PREFIX": key_prefix,
        "CRAWLFLEET_REVISIT": policy,
        "CRAWLFLEET_REVISIT_INTERVAL_SECONDS": interval,
        "CRAWLFLEET_REVISIT_MIN_SECONDS": interval / 2,
        "CRAWLFLEET_REVISIT_MAX_SECONDS": seconds,
        "CRAWLFLEET_REVISIT_IGNORE_FIELDS": json.dumps(["updated_at"]),
        "CRAWLFLEET_RATE_LIMITS": json.dumps({"*": f"{rate}/1s"}),
        "CRAWLFLEET_ITEM_STAGES": "",
        "CONCURRENT_REQUESTS": 16,
        "DEFAULT_REQUEST_HEADERS": json.dumps({CLIENT_HEADER: CLIENT}),
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
        "COOKIES_ENABLED": False,
    }
    procs: list[subprocess.Popen[bytes]] = []
    client = redis.Redis.from_url(redis_url)
    try:
        procs = [
            start_node(
                SPIDER,
                job=job,
                redis_url=redis_url,
                log=workdir / f"node{i}.log",
                spider_args={"start_urls": ",".join(model.seed_urls(port))},
                settings=settings,
            )
            for i in range(nodes)
        ]
        _run_for(warmup, procs, workdir)
        reset_stats(port)
        began_ms = _redis_ms(client)
        _run_for(seconds, procs, workdir)
        figures = fetch_change_stats(port)
        events: list[Any] = client.xrange(keys.changes, min=str(began_ms), max="+") or []
        raw: dict[bytes, bytes] = client.hgetall(keys.counters)  # type: ignore[assignment]
        counters = {text(k): counter_value(v) for k, v in raw.items()}
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        wait_all(procs, 20)
        kill_left(procs)
        stop_site_process(site)
        client.close()
    by_url = {model.url(n, port): schedule.page_class(n) for n in range(pages)}
    versions: dict[str, int] = {name: 0 for name in figures.classes}
    for _id, fields in events:
        try:
            event = json.loads(fields[b"e"])
        except (KeyError, TypeError, ValueError):
            continue
        if isinstance(event, dict) and event.get("kind", "changed") == "changed":
            name = by_url.get(str(event.get("url")))
            if name is not None:
                versions[name] = versions.get(name, 0) + 1
    etag: ChangeCounts | None = figures.validators.get("etag")
    return FreshnessResult(
        policy=policy,
        nodes=nodes,
        pages=pages,
        time_scale=time_scale,
        rate_limit=rate,
        interval_s=round(interval, 3),
        warmup_s=warmup,
        seconds=seconds,
        total=figures.total.as_dict(),
        classes={name: counts.as_dict() for name, counts in figures.classes.items()},
        validators_304_share=(
            round(etag.not_modified / etag.fetches, 3) if etag and etag.fetches else None
        ),
        versions=versions,
        counters=counters,
    )


def _redis_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _run_for(seconds: float, procs: list[subprocess.Popen[bytes]], workdir: Path) -> None:
    """Let the nodes crawl *seconds*. A continuous job's nodes never finish on their
    own: one that exits failed (RuntimeError with the end of its log)."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(1.0, left))
        for i, p in enumerate(procs):
            if p.poll() is not None:
                log = (workdir / f"node{i}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"freshness: node {i} exited with {p.returncode}:\n{log}")
