"""``crawlfleet bench``: crawlfleet against vanilla Scrapy on the bundled site.

Runs, in one invocation: vanilla Scrapy and crawlfleet with 1, 2 and 4 nodes on a
CPU-bound site (no latency) and on a latency-bound one; then the seen-filter's memory
per URL (exact and Bloom) and the Bloom filter's measured false-positive rate; then the
item pipeline: items/s into each store (SQLite, PostgreSQL when one answers, the Redis
stream, an item worker moving the stream into SQLite), text-extraction quality and
legacy-encoding correctness on the bundled site; then fault trials (nodes storing into
SQL killed with SIGKILL or a double Ctrl-C at random moments: nothing may be lost) and
the store-outage trial (PostgreSQL down 30 s, a node killed 15 s in: nothing lost, at
most the killed node's CRAWLFLEET_ITEMS_PENDING_MAX plus its in-flight pages fetched
again). The redis-cpu part measures Redis's main-thread CPU per crawled page, with the
nodes' seen cache on and off, on a Redis of its own, crawling a test site whose pages
repeat navigation links (or a real site: --redis-cpu-url).
Prints tables and writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from crawlfleet.benchmark.balance import BalanceResult, run_balance
from crawlfleet.benchmark.cluster import ClusterResult, run_cluster
from crawlfleet.benchmark.crawl import CrawlResult, Scenario, run_crawl
from crawlfleet.benchmark.faults import FAULTS, FaultResult, run_fault_trial
from crawlfleet.benchmark.items import POSTGRES_URL_ENV, find_postgres, run_items
from crawlfleet.benchmark.memory import measure_seen
from crawlfleet.benchmark.outage import OutageResult, run_outage_trial
from crawlfleet.benchmark.polite import PoliteResult, run_polite
from crawlfleet.benchmark.rediscpu import RedisCpuResult, run_redis_cpu
from crawlfleet.benchmark.report import (
    balance_report,
    cluster_report,
    crawl_report,
    faults_report,
    outage_report,
    polite_report,
    redis_cpu_report,
    scale_report,
    scaling_report,
)
from crawlfleet.benchmark.scale import run_scale
from crawlfleet.cli.options import (
    add_redis_options,
    add_settings_option,
    check_reachable,
    command_settings,
    resolved_url,
)
from crawlfleet.exceptions import ConfigError
from crawlfleet.settings.config import MAX_SHARDS, RedisConfig

NAME = "bench"
#: The parts of the benchmark, in the order they run.
PARTS = [
    "cpu", "near", "latency", "polite", "balance", "seen", "redis-cpu", "items", "faults",
    "scale", "cluster",
]  # fmt: skip
#: Parts that run only when named with --only (long, and on Redis servers of their own).
OPT_IN = ("scale", "cluster")
#: Parts that run on Redis servers of their own (the fleet's is not needed for them).
OWN_REDIS = (*OPT_IN, "redis-cpu")
HELP = (
    "benchmark: throughput vs vanilla Scrapy, Redis round trips, seen-filter memory, item pipeline"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cpu-pages", type=int, default=3000, help="pages of the CPU-bound site (default 3000)"
    )
    parser.add_argument(
        "--latency-pages",
        type=int,
        default=800,
        help="pages of the latency-bound site (default 800)",
    )
    parser.add_argument(
        "--latency",
        type=float,
        default=0.2,
        help="latency of the latency-bound site in seconds (default 0.2)",
    )
    parser.add_argument("--nodes", default="1,2,4", help="node counts (default 1,2,4)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="runs of the CPU-bound crawl with 2 and 4 nodes, to check that 4 nodes are "
        "never slower than 2 (default 5)",
    )
    parser.add_argument(
        "--near-latency",
        type=float,
        default=0.05,
        help="latency (s) of the site on which one node is compared with vanilla Scrapy "
        "beside the CPU-bound one (default 0.05)",
    )
    parser.add_argument(
        "--seen-urls",
        type=int,
        default=1_000_000,
        help="fingerprints for the memory measurement (default 1M)",
    )
    parser.add_argument(
        "--scrapy-redis-cap",
        type=float,
        default=60,
        help="stop a scrapy-redis run after this many seconds (default 60)",
    )
    parser.add_argument(
        "--items",
        type=int,
        default=20_000,
        help="items fed to the item pipeline per store (default 20000)",
    )
    parser.add_argument(
        "--items-site-pages",
        type=int,
        default=600,
        help="pages of the site whose articles and legacy-encoded pages are checked (default 600)",
    )
    parser.add_argument(
        "--items-postgres-url",
        metavar="URL",
        help=f"PostgreSQL for the item store figures (default: ${POSTGRES_URL_ENV}, else "
        "the test URLs postgresql+psycopg://root|postgres@127.0.0.1:5432/test); "
        "skipped with the reason when it does not answer",
    )
    parser.add_argument(
        "--polite-rates",
        default="5,50,500",
        help="rate limits (requests/s) of the politeness runs, one site each (default 5,50,500)",
    )
    parser.add_argument(
        "--polite-seconds",
        type=float,
        default=8.0,
        help="how long each politeness run lasts at its limit (default 8)",
    )
    parser.add_argument(
        "--polite-nodes", type=int, default=4, help="nodes of each politeness run (default 4)"
    )
    parser.add_argument(
        "--polite-jobs",
        default="1,2",
        help="how many jobs share the site's budget, one politeness run each per rate "
        "(default 1,2: the nodes in one job, then split over two)",
    )
    parser.add_argument(
        "--balance-pages",
        type=int,
        default=1500,
        help="pages of each load-balancing run (default 1500)",
    )
    parser.add_argument(
        "--balance-latency",
        type=float,
        default=0.1,
        help="site latency of the load-balancing runs in seconds (default 0.1)",
    )
    parser.add_argument(
        "--fault-trials",
        type=int,
        default=10,
        help="fault trials (kill -9 and double Ctrl-C of a node storing into SQL, "
        "alternating; default 10)",
    )
    parser.add_argument(
        "--fault-pages", type=int, default=300, help="pages of each fault trial (default 300)"
    )
    parser.add_argument(
        "--scale-urls",
        type=int,
        default=100_000_000,
        help="scale part: URLs added to a Bloom filter at 1e-3 (default 100M)",
    )
    parser.add_argument(
        "--scale-queued",
        type=int,
        default=10_000_000,
        help="scale part: requests queued (default 10M)",
    )
    parser.add_argument(
        "--scale-sites", type=int, default=10_000, help="scale part: sites (default 10000)"
    )
    parser.add_argument(
        "--scale-leases",
        type=int,
        default=1_000_000,
        help="scale part: requests leased and acknowledged (default 1M)",
    )
    parser.add_argument(
        "--scale-redis-server",
        metavar="PATH",
        help="scale part: the redis-server binary to run (default: the embedded Redis's)",
    )
    parser.add_argument(
        "--cluster-shards",
        type=int,
        default=12,
        help="cluster part: shards of the sharded job (default 12; it also runs with 1)",
    )
    parser.add_argument(
        "--cluster-queued",
        type=int,
        default=1_000_000,
        help="cluster part: requests queued in each run (default 1M; sites: --scale-sites, "
        "redis-server: --scale-redis-server)",
    )
    parser.add_argument(
        "--cluster-leases",
        type=int,
        default=200_000,
        help="cluster part: requests leased and acknowledged in each run (default 200k)",
    )
    parser.add_argument(
        "--redis-cpu-pages",
        type=int,
        default=2000,
        help="redis-cpu part: pages of the test site (default 2000)",
    )
    parser.add_argument(
        "--redis-cpu-menu",
        type=int,
        default=18,
        help="redis-cpu part: menu links to the first pages of its host on every page, "
        "besides home and catalogue (default 18: 20 navigation links a page)",
    )
    parser.add_argument(
        "--redis-cpu-nodes", type=int, default=4, help="redis-cpu part: nodes (default 4)"
    )
    parser.add_argument(
        "--redis-cpu-url",
        metavar="URL",
        help="redis-cpu part: crawl every page of this site's origin from URL instead of the "
        "test site (a real one: e.g. Java's API docs served by the shared realsites.sh)",
    )
    parser.add_argument(
        "--redis-cpu-urls",
        metavar="FILE",
        type=Path,
        help="redis-cpu part with --redis-cpu-url: write the URLs fetched (cache on) to FILE",
    )
    parser.add_argument(
        "--redis-cpu-cache",
        type=int,
        default=200_000,
        help="redis-cpu part: CRAWLFLEET_SEEN_CACHE_SIZE of the run with the cache; a "
        "second run has none (default 200000)",
    )
    parser.add_argument(
        "--redis-cpu-profile",
        action="store_true",
        help="redis-cpu part: also sum Redis's time by script (its slow log takes every "
        "call, which costs Redis CPU of its own: the totals are higher)",
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=PARTS,
        help="leave out a part",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        choices=PARTS,
        help="run only this part (repeat for several); 'scale' (about 25 minutes and 3 GB "
        "of memory at its defaults, on a Redis of its own) and 'cluster' (a few minutes, "
        "on a 3-master Redis Cluster of its own) run only when named here; 'redis-cpu' "
        "runs on Redis servers of its own too",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=Path("bench-results.json"),
        help="where to write the figures (default bench-results.json)",
    )
    add_redis_options(parser)
    add_settings_option(parser)


def run(args: argparse.Namespace) -> int:
    console = Console(width=max(Console().width, 150))
    args.skip = [p for p in PARTS if p not in args.only] if args.only else [*args.skip, *OPT_IN]
    if "items" not in args.skip and (args.items < 1 or args.items_site_pages < 3):
        console.print("[red]--items must be >= 1 and --items-site-pages >= 3[/]")
        return 2
    counts = {
        "scale": ("scale_urls", "scale_queued", "scale_sites", "scale_leases"),
        "cluster": ("cluster_queued", "cluster_leases", "scale_sites"),
    }
    for part, options in counts.items():
        for option in options if part not in args.skip else ():
            if getattr(args, option) < 1:
                raise ConfigError(f"--{option.replace('_', '-')} must be at least 1")
    if "cluster" not in args.skip and not 2 <= args.cluster_shards <= MAX_SHARDS:
        raise ConfigError(f"--cluster-shards must be from 2 to {MAX_SHARDS}")
    if set(OWN_REDIS) - set(args.skip):
        server = args.scale_redis_server
        if server and not (Path(server).is_file() and os.access(server, os.X_OK)):
            raise ConfigError(f"--scale-redis-server {server}: not an executable file")
    if "polite" not in args.skip:
        _rates(args.polite_rates)
        if max(_rates(args.polite_jobs, "--polite-jobs")) > args.polite_nodes:
            raise ConfigError("--polite-jobs cannot be more than --polite-nodes")
    config = RedisConfig.from_settings(command_settings(args))
    if "redis-cpu" not in args.skip and min(args.redis_cpu_pages, args.redis_cpu_nodes) < 1:
        raise ConfigError("--redis-cpu-pages and --redis-cpu-nodes must be at least 1")
    # some parts run on Redis servers of their own: the fleet's is needed for the others
    url = ""
    if set(PARTS) - set(args.skip) - set(OWN_REDIS):
        url = resolved_url(args, config)
        check_reachable(url)  # one line now, not after minutes of crawls that cannot start
    prefix = f"{config.key_prefix}bench"
    nodes = [int(n) for n in args.nodes.split(",") if n.strip()]
    scenarios = []
    if "cpu" not in args.skip:
        scenarios.append(Scenario("cpu-bound", args.cpu_pages, 0.0, 16))
    if "near" not in args.skip:  # one node against vanilla Scrapy at a small latency
        scenarios.append(
            Scenario(f"latency-{args.near_latency * 1000:.0f}ms", 1500, args.near_latency, 16)
        )
    if "latency" not in args.skip:
        scenarios.append(Scenario("latency-bound", args.latency_pages, args.latency, 8))
    results: list[CrawlResult] = []
    contenders = [("scrapy", 1)] + [("crawlfleet", n) for n in nodes]
    if importlib.util.find_spec("scrapy_redis") is not None:
        contenders.append(("scrapy-redis", 1))
    elif scenarios:
        console.print("scrapy-redis is not installed: left out of the comparison")
    for scenario in scenarios:
        extra = [("crawlfleet+pipeline", 1)] if scenario.name == "cpu-bound" else []
        runs = contenders + extra
        if scenario.name.startswith("latency-") and scenario.name != "latency-bound":
            runs = [("scrapy", 1), ("crawlfleet", 1)]
        for contender, n in runs:
            console.print(f"{scenario.name}: {contender} x{n} ...")
            cap = args.scrapy_redis_cap if contender == "scrapy-redis" else None
            results.append(
                run_crawl(scenario, contender, n, redis_url=url, key_prefix=prefix, cap_seconds=cap)
            )
    # 4 nodes must never be slower than 2: the first pair is in the table above, the
    # others are run now, in turn
    scaling: list[CrawlResult] = [
        r for r in results if r.scenario == "cpu-bound" and r.contender == "crawlfleet"
    ]
    if "cpu" not in args.skip and {2, 4} <= set(nodes):
        for i in range(1, args.repeats):
            for n in (2, 4):
                console.print(f"cpu-bound: crawlfleet x{n}, repeat {i + 1} of {args.repeats} ...")
                scaling.append(
                    run_crawl(scenarios[0], "crawlfleet", n, redis_url=url, key_prefix=prefix)
                )
    polite: list[PoliteResult] = []
    if "polite" not in args.skip:
        for rate in _rates(args.polite_rates):
            for jobs in _rates(args.polite_jobs, "--polite-jobs"):
                console.print(
                    f"polite: crawlfleet x{args.polite_nodes} in {jobs} job(s), one site "
                    f"limited to {rate}/s"
                )
                polite.append(
                    run_polite(
                        rate,
                        seconds=args.polite_seconds,
                        nodes=args.polite_nodes,
                        redis_url=url,
                        key_prefix=prefix,
                        jobs=jobs,
                    )
                )
    balance: list[BalanceResult] = []
    if "balance" not in args.skip:
        for case in ("equal", "uneven", "join", "kill"):
            console.print(f"balance: {case} ...")
            balance.append(
                run_balance(
                    case,
                    pages=args.balance_pages,
                    latency=args.balance_latency,
                    concurrency=8,
                    redis_url=url,
                    key_prefix=prefix,
                )
            )
    seen = []
    if "seen" not in args.skip:
        for mode, error in (("exact", 0.0), ("bloom", 1e-3), ("bloom", 1e-6)):
            console.print(f"seen-filter {mode} {error or ''} with {args.seen_urls} URLs ...")
            seen.append(
                measure_seen(
                    url, prefix, mode, args.seen_urls, error or 1e-3, probes=args.seen_urls
                )
            )
    redis_cpu = _redis_cpu(console, args) if "redis-cpu" not in args.skip else []
    items = None
    if "items" not in args.skip:
        items = run_items(
            url,
            prefix,
            count=args.items,
            site_pages=args.items_site_pages,
            postgres_url=args.items_postgres_url,
            progress=lambda line: console.print(line, markup=False),
        )
    faults: list[FaultResult] = []
    outage: OutageResult | None = None
    if "faults" not in args.skip:
        faults = _fault_trials(console, args, url, prefix)
        outage = _outage_trial(console, args, url, prefix)
    scale = None
    if "scale" not in args.skip:
        console.print(
            f"scale: {args.scale_urls:,} URLs in a Bloom filter, {args.scale_queued:,} queued "
            f"requests over {args.scale_sites:,} sites, {args.scale_leases:,} leased, on a "
            "Redis of its own ..."
        )
        scale = run_scale(
            urls=args.scale_urls,
            queued=args.scale_queued,
            sites=args.scale_sites,
            lease_sample=args.scale_leases,
            server=args.scale_redis_server,
        )
    cluster: list[ClusterResult] = []
    if "cluster" not in args.skip:
        console.print(
            f"cluster: {args.cluster_queued:,} requests over {args.scale_sites:,} sites, "
            f"{args.cluster_leases:,} leased, in 1 shard and in {args.cluster_shards}, on a "
            "3-master Redis Cluster of its own ..."
        )
        cluster = run_cluster(
            shards=args.cluster_shards,
            queued=args.cluster_queued,
            sites=args.scale_sites,
            leases=args.cluster_leases,
            server=args.scale_redis_server,
        )
    report = crawl_report(console, results, seen, items)
    if redis_cpu:
        _add_part(console, report, "redis_cpu", redis_cpu, redis_cpu_report(console, redis_cpu))
    if scale is not None:
        _add_part(console, report, "scale", [scale], scale_report(console, scale))
    if cluster:
        _add_part(console, report, "cluster", cluster, cluster_report(console, cluster))
    if scaling:
        _add_part(console, report, "scaling", scaling, scaling_report(console, scaling))
    if polite:
        _add_part(console, report, "polite", polite, polite_report(console, polite))
    if balance:
        _add_part(console, report, "balance", balance, balance_report(console, balance))
    if faults:
        _add_part(console, report, "faults", faults, faults_report(console, faults))
    if outage is not None:
        _add_part(console, report, "outage", [outage], outage_report(console, outage))
    report["command"] = "crawlfleet bench " + " ".join(
        f"--{k.replace('_', '-')}={v}"
        for k, values in sorted(vars(args).items())
        for v in (values if isinstance(values, list) else [values])
        if k
        in (
            "cpu_pages",
            "latency_pages",
            "latency",
            "nodes",
            "repeats",
            "near_latency",
            "seen_urls",
            "items",
            "items_site_pages",
            "polite_rates",
            "polite_seconds",
            "polite_nodes",
            "polite_jobs",
            "balance_pages",
            "balance_latency",
            "fault_trials",
            "fault_pages",
            "scale_urls",
            "scale_queued",
            "scale_sites",
            "scale_leases",
            "scale_redis_server",
            "cluster_shards",
            "cluster_queued",
            "cluster_leases",
            "redis_cpu_pages",
            "redis_cpu_menu",
            "redis_cpu_nodes",
            "redis_cpu_url",
            "redis_cpu_cache",
            "redis_cpu_profile",
            "only",
        )
    )
    report["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    args.json.write_text(json.dumps(report, indent=2))
    console.print(f"figures written to {args.json}")
    return 0 if report["targets_met"] else 1


def _redis_cpu(console: Console, args: argparse.Namespace) -> list[RedisCpuResult]:
    """The redis-cpu part: one crawl with the nodes' seen cache, one without."""
    results = []
    where = args.redis_cpu_url or (
        f"the test site ({args.redis_cpu_pages} pages, {2 + args.redis_cpu_menu} "
        "navigation links a page)"
    )
    for cache in (args.redis_cpu_cache, 0):
        console.print(
            f"redis-cpu: {args.redis_cpu_nodes} nodes crawl {escape(where)}, seen cache "
            f"{cache or 'off'}, on a Redis of their own ..."
        )
        result = run_redis_cpu(
            cache_size=cache,
            nodes=args.redis_cpu_nodes,
            pages=args.redis_cpu_pages,
            menu_pages=args.redis_cpu_menu,
            site_url=args.redis_cpu_url or "",
            server=args.scale_redis_server,
            profile=args.redis_cpu_profile,
        )
        if cache and args.redis_cpu_urls and result.urls:
            args.redis_cpu_urls.write_text("\n".join(result.urls) + "\n", encoding="utf-8")
        results.append(result)
    return results


def _fault_trials(
    console: Console, args: argparse.Namespace, redis_url: str, prefix: str
) -> list[FaultResult]:
    """Run the fault trials into PostgreSQL when one answers, else into SQLite."""
    import tempfile

    postgres, why = find_postgres(args.items_postgres_url)
    workdir = Path(tempfile.mkdtemp(prefix="crawlfleet-faults-"))
    sql_url = postgres or f"sqlite:///{workdir / 'items.sqlite3'}"
    if postgres is None:
        console.print(f"fault trials into SQLite: {escape(why)}")
    results = []
    for n in range(args.fault_trials):
        fault = FAULTS[n % len(FAULTS)]
        console.print(f"fault trial {n + 1}/{args.fault_trials}: {fault} ...")
        results.append(
            run_fault_trial(
                fault,
                sql_url=sql_url,
                redis_url=redis_url,
                workdir=workdir / f"trial{n + 1}",
                key_prefix=prefix,
                pages=args.fault_pages,
                seed=n,
            )
        )
    return results


def _outage_trial(
    console: Console, args: argparse.Namespace, redis_url: str, prefix: str
) -> OutageResult | None:
    """The store-outage trial (PostgreSQL down 30 s, a node killed 15 s in); None without
    a PostgreSQL (the outage is a proxy in front of it)."""
    import tempfile

    postgres, why = find_postgres(args.items_postgres_url)
    if postgres is None:
        console.print(f"no store-outage trial: {escape(why)}")
        return None
    console.print("store-outage trial: PostgreSQL down 30 s, a node killed 15 s in ...")
    workdir = Path(tempfile.mkdtemp(prefix="crawlfleet-outage-"))
    return run_outage_trial(
        postgres_url=postgres, redis_url=redis_url, workdir=workdir, key_prefix=prefix
    )


def _add_part(
    console: Console, report: dict[str, Any], key: str, rows: list[Any], targets: dict[str, bool]
) -> None:
    """Add a part's *rows* and *targets* to *report*, and print the targets."""
    report[key] = [r.as_dict() for r in rows]
    report["targets"].update(targets)
    for name, ok in targets.items():
        console.print(f"{'[green]met[/]' if ok else '[red]MISSED[/]'}  {name}")
    report["targets_met"] = all(report["targets"].values())


def _rates(text: str, option: str = "--polite-rates") -> list[int]:
    """The positive whole numbers of a comma-separated option; ConfigError naming it."""
    try:
        rates = [int(r) for r in text.split(",") if r.strip()]
    except ValueError:
        rates = []
    if not rates or min(rates) < 1:
        raise ConfigError(f"{option} must be positive whole numbers like 1,2, got {text!r}")
    return rates
