"""``crawlfleet demo``: a whole cluster on this machine, checked page by page.

Starts the embedded Redis (unless a URL is given) and the bundled test site, runs
several node processes of one job with the site's spider spec (``testsite/spec.yaml``,
also ``examples/testsite.yaml``), shows live progress, and ends with a summary read from
the site's own request counts. Items go to a JSON-lines file per node and, through the
item stages, into a SQLite store. Exit status 0 only if the crawl is complete and exact:
every page fetched, none twice, one item per page in the files and in SQLite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from crawlfleet.cli.options import (
    add_fleet_options,
    check_reachable,
    command_settings,
    resolved_url,
)
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.node.launcher import start_node
from crawlfleet.redis.config import RedisConfig
from crawlfleet.redis.connection import make_client, redact
from crawlfleet.redis.keys import JobKeys
from crawlfleet.redis.replies import node_statuses
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.process import fetch_stats, start_site_process, stop_site_process

NAME = "demo"
HELP = "run a demo crawl: embedded Redis, the bundled site, several nodes, a checked result"

SPEC = str(Path(__file__).resolve().parents[1] / "testsite" / "spec.yaml")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=3, help="node processes (default 3)")
    parser.add_argument("--pages", type=int, default=600, help="pages on the site")
    parser.add_argument("--hosts", type=int, default=3, help="host names (127.0.0.N)")
    parser.add_argument(
        "--latency", type=float, default=0.02, help="seconds the site waits before each answer"
    )
    parser.add_argument("--concurrency", type=int, default=8, help="CONCURRENT_REQUESTS per node")
    parser.add_argument(
        "--spider",
        default=SPEC,
        help="spider to run: a spec file or module:Class (default: the test site's spec)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the job's state in Redis afterwards (default: reset it)",
    )
    parser.add_argument("--timeout", type=float, default=600, help="give up after seconds")
    add_fleet_options(parser)


def run(args: argparse.Namespace) -> int:
    console = Console()
    if args.nodes < 1 or args.pages < 1:
        console.print("[red]--nodes and --pages must be at least 1[/]")
        return 2
    settings = command_settings(args)
    redis_config = RedisConfig.from_settings(settings)
    url = resolved_url(args, redis_config, quiet=True)  # said below
    check_reachable(url)
    data_dir = redis_config.data_dir.resolve()
    job = time.strftime("demo-%Y%m%d-%H%M%S")
    out_dir = data_dir / "demo" / job
    out_dir.mkdir(parents=True, exist_ok=True)
    console.print(f"Redis: {redact(url)}{' (embedded)' if not redis_config.url else ''}")

    model = SiteModel(pages=args.pages, hosts=args.hosts)
    with open(out_dir / "site.log", "wb") as site_log:
        site, port = start_site_process(
            model, latency_seconds=args.latency, timeout_seconds=3, stderr=site_log
        )
    try:
        seeds = model.seed_urls(port)
        console.print(f"Test site: {', '.join(seeds)} ({args.pages} pages)")
        node_settings: dict[str, Any] = {
            "CONCURRENT_REQUESTS": args.concurrency,
            "DOWNLOAD_TIMEOUT": 1,
            "RETRY_TIMES": 1,
            "LOG_LEVEL": "INFO",
            "LOGSTATS_INTERVAL": 3600,
            "TELNETCONSOLE_ENABLED": False,
            "CRAWLFLEET_DATA_DIR": str(data_dir),
            "CRAWLFLEET_KEY_PREFIX": redis_config.key_prefix,
            "CRAWLFLEET_STORES": "sql",
            "CRAWLFLEET_SQL_URL": f"sqlite:///{out_dir / 'items.sqlite3'}",
        }
        node_settings.update(dict(item.split("=", 1) for item in args.settings))
        spider_args = {"start_urls": ",".join(seeds)}
        if args.spider == SPEC:  # its allowed_domains name the site's first 3 hosts
            spider_args["allowed_domains"] = ",".join(urlsplit(u).hostname or "" for u in seeds)
        procs = [
            start_node(
                args.spider,
                job=job,
                redis_url=url,
                log=out_dir / f"node-{i}.log",
                spider_args=spider_args,
                settings=node_settings,
                output=out_dir / f"items-{i}.jsonl",
            )
            for i in range(args.nodes)
        ]
        console.print(f"Job {job}: {args.nodes} nodes, logs and items in {out_dir}")
        started = time.monotonic()
        timed_out = _watch(
            console, procs, url, redis_config.key_prefix, job, port, started, args.timeout
        )
        codes = [p.poll() for p in procs]
        elapsed = time.monotonic() - started
        stats = fetch_stats(port)
    finally:
        stop_site_process(site)
    ok = _summary(console, model, stats, out_dir, codes, elapsed, timed_out)
    if not args.keep:
        asyncio.run(_reset(url, redis_config.key_prefix, job))
    return 0 if ok else 1


def _watch(
    console: Console,
    procs: list[Any],
    url: str,
    prefix: str,
    job: str,
    port: int,
    started: float,
    timeout: float,
) -> bool:
    """Live view until every node has exited; True if the timeout cut it short."""
    keys = JobKeys.of(prefix, job)
    seen: dict[str, Any] = {}  # last status of every node: a node removes it when it stops
    with Live(console=console, refresh_per_second=4, transient=False) as live:
        while any(p.poll() is None for p in procs):
            if time.monotonic() - started > timeout:
                for p in procs:
                    p.terminate()
                return True
            try:
                nodes, counters = asyncio.run(_snapshot(url, keys))
                site = fetch_stats(port, brief=True)
            except Exception as exc:  # progress display only; the crawl is not affected
                live.update(Panel(f"waiting: {exc}"))
                time.sleep(0.5)
                continue
            seen.update(nodes)
            live.update(_progress(procs, seen, counters, site, time.monotonic() - started))
            time.sleep(0.5)
    return False


async def _snapshot(url: str, keys: JobKeys) -> tuple[dict[str, Any], dict[str, int]]:
    client = make_client(url)
    try:
        raw = await client.hgetall(keys.nodeinfo)
        counters = await JobFrontier(client, keys).counters()
        return node_statuses(raw), counters
    finally:
        await client.aclose()


def _progress(
    procs: list[Any],
    nodes: dict[str, Any],
    counters: dict[str, int],
    site: dict[str, Any],
    elapsed: float,
) -> Group:
    table = Table(title=f"crawl progress ({elapsed:.0f}s)")
    for col in ("node", "pid", "pages", "items", "pages/s", "buffered", "in progress"):
        table.add_column(col, justify="right" if col != "node" else "left")
    alive = {p.pid for p in procs if p.poll() is None}
    for node, info in sorted(nodes.items()):
        pid = info.get("pid")
        if pid not in {p.pid for p in procs}:
            continue
        up = max(time.time() - float(info.get("started", time.time())), 1e-6)
        table.add_row(
            node,
            f"{pid}{'' if pid in alive else ' (exited)'}",
            str(info.get("pages", 0)),
            str(info.get("items", 0)),
            f"{info.get('pages', 0) / up:.0f}",
            str(info.get("buffered", 0)),
            str(info.get("in_progress", 0)),
        )
    line = (
        f"site: {site.get('content_fetched', 0)}/{site.get('expected_urls', 0)} pages, "
        f"{site.get('total_requests', 0)} requests | frontier: "
        f"{counters.get('queued', 0)} queued, {counters.get('leased', 0)} leased, "
        f"{counters.get('duplicates', 0)} duplicates filtered"
    )
    return Group(table, line)


def _summary(
    console: Console,
    model: SiteModel,
    stats: dict[str, Any],
    out_dir: Path,
    codes: list[int | None],
    elapsed: float,
    timed_out: bool,
) -> bool:
    items: list[dict[str, Any]] = []
    for path in sorted(out_dir.glob("items-*.jsonl")):
        items += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    unique = {i.get("url") for i in items}
    sql_rows = _sql_rows(out_dir / "items.sqlite3")
    twice, never = stats["fetched_twice"], stats["never_fetched"]
    table = Table(title="demo result (from the site's own request counts)")
    table.add_column("check")
    table.add_column("value", justify="right")
    table.add_column("ok")
    rows = [
        (
            "pages crawled",
            f"{stats['content_fetched']}/{stats['expected_urls']}",
            stats["content_fetched"] == stats["expected_urls"],
        ),
        ("never fetched", str(len(never)), not never),
        ("fetched twice", str(len(twice)), not twice),
        (
            "items in JSON lines",
            f"{len(items)} ({len(unique)} distinct)",
            len(items) == len(unique) == model.pages,
        ),
        ("items in SQLite (upserted by key)", str(sql_rows), sql_rows == model.pages),
        (
            "nodes finished cleanly",
            f"{sum(c == 0 for c in codes)}/{len(codes)}",
            all(c == 0 for c in codes) and not timed_out,
        ),
    ]
    for name, value, ok in rows:
        table.add_row(name, value, "[green]yes[/]" if ok else "[red]NO[/]")
    console.print(table)
    rate = stats["total_requests"] / max(elapsed, 1e-6)
    console.print(
        f"{stats['total_requests']} requests in {elapsed:.1f}s ({rate:.0f}/s); items in {out_dir}"
    )
    for url in never[:5]:
        console.print(f"  never fetched: {url}")
    for entry in twice[:5]:
        console.print(f"  fetched twice: {entry}")
    ok = all(r[2] for r in rows)
    console.print("[green]complete and exact[/]" if ok else "[red]the crawl is NOT exact[/]")
    return ok


def _sql_rows(path: Path) -> int:
    import sqlite3

    if not path.exists():
        return 0
    with sqlite3.connect(path) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return sum(int(db.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0]) for t in tables)


async def _reset(url: str, prefix: str, job: str) -> None:
    client = make_client(url)
    try:
        await JobFrontier(client, JobKeys.of(prefix, job)).reset()
    finally:
        await client.aclose()
