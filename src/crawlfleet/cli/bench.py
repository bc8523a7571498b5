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
Each run's figures are printed as it ends, each part's table and targets when the part
ends, and the JSON file is rewritten after each part (``"complete": false`` until the
end), so a long run can be watched. ``--quick`` is a first look in about two minutes.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path
from typing import Any

from rich.console import Console

from crawlfleet.benchmark.balance import BalanceResult, run_balance
from crawlfleet.benchmark.cluster import run_cluster
from crawlfleet.benchmark.crawl import CrawlResult, Scenario, run_crawl
from crawlfleet.benchmark.faults import FAULTS, FaultResult, run_fault_trial
from crawlfleet.benchmark.items import POSTGRES_URL_ENV, find_postgres, run_items
from crawlfleet.benchmark.manager import run_manager_bench
from crawlfleet.benchmark.outage import OutageResult, run_outage_trial
from crawlfleet.benchmark.polite import PoliteResult, run_polite
from crawlfleet.benchmark.rediscpu import RedisCpuResult, run_redis_cpu
from crawlfleet.benchmark.report import (
    balance_report,
    cluster_report,
    crawl_report,
    faults_report,
    items_report,
    manager_report,
    outage_report,
    polite_report,
    redis_cpu_report,
    scale_report,
    scaling_report,
    seen_report,
)
from crawlfleet.benchmark.results import Results
from crawlfleet.benchmark.scale import run_scale
from crawlfleet.benchmark.seenfilter import measure_seen
from crawlfleet.cli.arguments import Option, add_options
from crawlfleet.cli.options import (
    add_fleet_options,
    check_reachable,
    command_settings,
    resolved_url,
)
from crawlfleet.exceptions import ConfigError
from crawlfleet.frontier.records import MAX_SHARDS
from crawlfleet.redis.config import RedisConfig

NAME = "bench"
#: The parts of the benchmark, in the order they run.
PARTS = [
    "cpu", "near", "latency", "polite", "balance", "seen", "redis-cpu", "items", "faults",
    "manager", "scale", "cluster",
]  # fmt: skip
#: Parts that run only when named with --only (long, and on Redis servers of their own).
OPT_IN = ("scale", "cluster")
#: Parts that run on Redis servers of their own (the fleet's is not needed for them).
OWN_REDIS = (*OPT_IN, "redis-cpu")
HELP = (
    "benchmark: throughput vs vanilla Scrapy, Redis round trips, seen-filter memory, item pipeline"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(
        parser,
        Option("--cpu-pages", int, 3000, "pages of the CPU-bound site (default 3000)"),
        Option("--latency-pages", int, 800, "pages of the latency-bound site (default 800)"),
        Option(
            "--latency", float, 0.2, "latency of the latency-bound site in seconds (default 0.2)"
        ),
        Option("--nodes", str, "1,2,4", "node counts (default 1,2,4)"),
        Option(
            "--repeats",
            int,
            5,
            "runs of the CPU-bound crawl with 2 and 4 nodes, to check that 4 nodes are "
            "never slower than 2 (default 5)",
        ),
        Option(
            "--near-latency",
            float,
            0.05,
            "latency (s) of the site on which one node is compared with vanilla Scrapy "
            "beside the CPU-bound one (default 0.05)",
        ),
        Option(
            "--seen-urls", int, 1_000_000, "fingerprints for the memory measurement (default 1M)"
        ),
        Option(
            "--scrapy-redis-cap",
            float,
            60,
            "stop a scrapy-redis run after this many seconds (default 60)",
        ),
        Option("--items", int, 20_000, "items fed to the item pipeline per store (default 20000)"),
        Option(
            "--items-site-pages",
            int,
            600,
            "pages of the site whose articles and legacy-encoded pages are checked (default 600)",
        ),
        Option(
            "--items-postgres-url",
            str,
            None,
            f"PostgreSQL for the item store figures (default: ${POSTGRES_URL_ENV}, else "
            "the test URLs postgresql+psycopg://root|postgres@127.0.0.1:5432/test); "
            "skipped with the reason when it does not answer",
            metavar="URL",
        ),
        Option(
            "--polite-rates",
            str,
            "5,50,500",
            "rate limits (requests/s) of the politeness runs, one site each (default 5,50,500)",
        ),
        Option(
            "--polite-seconds",
            float,
            8.0,
            "how long each politeness run lasts at its limit (default 8)",
        ),
        Option("--polite-nodes", int, 4, "nodes of each politeness run (default 4)"),
        Option(
            "--polite-jobs",
            str,
            "1,2",
            "how many jobs share the site's budget, one politeness run each per rate "
            "(default 1,2: the nodes in one job, then split over two)",
        ),
        Option("--balance-pages", int, 1500, "pages of each load-balancing run (default 1500)"),
        Option(
            "--balance-latency",
            float,
            0.1,
            "site latency of the load-balancing runs in seconds (default 0.1)",
        ),
        Option(
            "--fault-trials",
            int,
            10,
            "fault trials (kill -9 and double Ctrl-C of a node storing into SQL, "
            "alternating; default 10)",
        ),
        Option("--fault-pages", int, 300, "pages of each fault trial (default 300)"),
        Option(
            "--manager-clients",
            int,
            50,
            "manager part: clients asking one after the other (default 50)",
        ),
        Option(
            "--manager-streams",
            int,
            20,
            "manager part: live streams read at the same time (default 20)",
        ),
        Option(
            "--manager-seconds", float, 60.0, "manager part: how long the crowd asks (default 60)"
        ),
        Option(
            "--scale-urls",
            int,
            100_000_000,
            "scale part: URLs added to a Bloom filter at 1e-3 (default 100M)",
        ),
        Option("--scale-queued", int, 10_000_000, "scale part: requests queued (default 10M)"),
        Option("--scale-sites", int, 10_000, "scale part: sites (default 10000)"),
        Option(
            "--scale-leases",
            int,
            1_000_000,
            "scale part: requests leased and acknowledged (default 1M)",
        ),
        Option(
            "--scale-redis-server",
            str,
            None,
            "scale part: the redis-server binary to run (default: the embedded Redis's)",
            metavar="PATH",
        ),
        Option(
            "--cluster-shards",
            int,
            12,
            "cluster part: shards of the sharded job (default 12; it also runs with 1)",
        ),
        Option(
            "--cluster-queued",
            int,
            1_000_000,
            "cluster part: requests queued in each run (default 1M; sites: --scale-sites, "
            "redis-server: --scale-redis-server)",
        ),
        Option(
            "--cluster-leases",
            int,
            200_000,
            "cluster part: requests leased and acknowledged in each run (default 200k)",
        ),
        Option(
            "--redis-cpu-pages", int, 2000, "redis-cpu part: pages of the test site (default 2000)"
        ),
        Option(
            "--redis-cpu-menu",
            int,
            18,
            "redis-cpu part: menu links to the first pages of its host on every page, "
            "besides home and catalogue (default 18: 20 navigation links a page)",
        ),
        Option("--redis-cpu-nodes", int, 4, "redis-cpu part: nodes (default 4)"),
        Option(
            "--redis-cpu-url",
            str,
            None,
            "redis-cpu part: crawl every page of this site's origin from URL instead of the "
            "test site (a real one: e.g. Java's API docs served by the shared realsites.sh)",
            metavar="URL",
        ),
        Option(
            "--redis-cpu-urls",
            Path,
            None,
            "redis-cpu part with --redis-cpu-url: write the URLs fetched (cache on) to FILE",
            metavar="FILE",
        ),
        Option(
            "--redis-cpu-cache",
            int,
            200_000,
            "redis-cpu part: CRAWLFLEET_SEEN_CACHE_SIZE of the run with the cache; a "
            "second run has none (default 200000)",
        ),
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
        "--quick",
        action="store_true",
        help="a first look in about two minutes: smaller runs (options given still win), "
        "without the load-balancing, near-latency, scrapy-redis and store-outage runs",
    )
    add_options(
        parser,
        Option(
            "--json",
            Path,
            Path("bench-results.json"),
            "where to write the figures (default bench-results.json)",
        ),
    )
    add_fleet_options(parser)


#: What --quick changes (an option given on the command line wins): a first look in
#: under two minutes on a quiet 2-core machine.
QUICK: dict[str, Any] = {
    "cpu_pages": 600,
    "latency_pages": 160,
    "nodes": "1,4",
    "repeats": 1,
    "seen_urls": 50_000,
    "items": 1000,
    "polite_rates": "50",
    "polite_seconds": 4.0,
    "polite_jobs": "1",
    "fault_trials": 1,
    "fault_pages": 100,
    "manager_seconds": 10.0,
    "redis_cpu_pages": 400,
}
#: Parts --quick leaves out (their shortest run is long), and the comparison it drops.
QUICK_SKIPS = ("near", "balance")
#: Options recorded in the report's command line.
RECORDED = (
    "cpu_pages", "latency_pages", "latency", "nodes", "repeats", "near_latency", "seen_urls",
    "items", "items_site_pages", "polite_rates", "polite_seconds", "polite_nodes",
    "polite_jobs", "balance_pages", "balance_latency", "fault_trials", "fault_pages",
    "scale_urls", "scale_queued", "scale_sites", "scale_leases", "scale_redis_server",
    "cluster_shards", "cluster_queued", "cluster_leases", "manager_clients", "manager_streams",
    "manager_seconds", "redis_cpu_pages", "redis_cpu_menu", "redis_cpu_nodes",
    "redis_cpu_url", "redis_cpu_cache", "redis_cpu_profile", "only", "quick",
)  # fmt: skip


def _apply_quick(args: argparse.Namespace) -> None:
    """--quick: smaller runs, wherever the option was left at its default."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    defaults = vars(parser.parse_args([]))
    for option, value in QUICK.items():
        if getattr(args, option) == defaults[option]:
            setattr(args, option, value)
    if not args.only:
        args.skip = [*args.skip, *QUICK_SKIPS]


def _command(args: argparse.Namespace) -> str:
    return "crawlfleet bench " + " ".join(
        f"--{k.replace('_', '-')}={v}"
        for k, values in sorted(vars(args).items())
        for v in (values if isinstance(values, list) else [values])
        if k in RECORDED and v not in (None, False)
    )


def run(args: argparse.Namespace) -> int:
    console = Console(width=max(Console().width, 150))
    if args.quick:
        _apply_quick(args)
    args.skip = [p for p in PARTS if p not in args.only] if args.only else [*args.skip, *OPT_IN]
    if "items" not in args.skip and (args.items < 1 or args.items_site_pages < 3):
        console.print("[red]--items must be >= 1 and --items-site-pages >= 3[/]")
        return 2
    counts = {
        "scale": ("scale_urls", "scale_queued", "scale_sites", "scale_leases"),
        "cluster": ("cluster_queued", "cluster_leases", "scale_sites"),
    }
    if "manager" not in args.skip:
        counts["manager"] = ("manager_clients", "manager_streams", "manager_seconds")
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
    out = Results(console, args.json, _command(args))
    out.note(f"parts: {', '.join(p for p in PARTS if p not in args.skip)}; figures in {args.json}")
    _crawls(out, args, url, prefix)
    if "polite" not in args.skip:
        polite: list[PoliteResult] = []
        for rate in _rates(args.polite_rates):
            for jobs in _rates(args.polite_jobs, "--polite-jobs"):
                out.note(
                    f"polite: crawlfleet x{args.polite_nodes} in {jobs} job(s), one site "
                    f"limited to {rate}/s ..."
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
        out.add("polite", polite, polite_report(console, polite))
    if "balance" not in args.skip:
        balance: list[BalanceResult] = []
        for case in ("equal", "uneven", "join", "kill"):
            out.note(f"balance: {case} ...")
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
        out.add("balance", balance, balance_report(console, balance))
    if "seen" not in args.skip:
        seen = []
        for mode, error in (("exact", 0.0), ("bloom", 1e-3), ("bloom", 1e-6)):
            out.note(f"seen-filter {mode} {error or ''} with {args.seen_urls} URLs ...")
            seen.append(
                measure_seen(
                    url, prefix, mode, args.seen_urls, error or 1e-3, probes=args.seen_urls
                )
            )
        out.add("seen", seen, seen_report(console, seen))
    if "redis-cpu" not in args.skip:
        redis_cpu = _redis_cpu(out, args)
        out.add("redis_cpu", redis_cpu, redis_cpu_report(console, redis_cpu))
    if "items" not in args.skip:
        out.note(f"items: {args.items} items through the pipeline into each store ...")
        items = run_items(
            url,
            prefix,
            count=args.items,
            site_pages=args.items_site_pages,
            postgres_url=args.items_postgres_url,
            progress=out.note,
        )
        out.add("items", items, items_report(console, items))
    if "faults" not in args.skip:
        faults = _fault_trials(out, args, url, prefix)
        out.add("faults", faults, faults_report(console, faults))
        if args.quick:
            out.note("no store-outage trial with --quick (it takes over a minute)")
        else:
            outage = _outage_trial(out, args, url, prefix)
            if outage is not None:
                out.add("outage", outage, outage_report(console, outage))
    if "manager" not in args.skip:
        out.note(
            f"manager: {args.manager_clients} clients and {args.manager_streams} live streams "
            f"for {args.manager_seconds:g} s ..."
        )
        crowd = run_manager_bench(
            url,
            prefix,
            clients=args.manager_clients,
            streams=args.manager_streams,
            seconds=args.manager_seconds,
        )
        out.add("manager", crowd, manager_report(console, crowd))
    if "scale" not in args.skip:
        out.note(
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
        out.add("scale", scale, scale_report(console, scale))
    if "cluster" not in args.skip:
        out.note(
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
        out.add("cluster", cluster, cluster_report(console, cluster))
    out.finish()
    return 0 if out.targets_met else 1


def _redis_cpu(out: Results, args: argparse.Namespace) -> list[RedisCpuResult]:
    """The redis-cpu part: one crawl with the nodes' seen cache, one without."""
    results = []
    where = args.redis_cpu_url or (
        f"the test site ({args.redis_cpu_pages} pages, {2 + args.redis_cpu_menu} "
        "navigation links a page)"
    )
    for cache in (args.redis_cpu_cache, 0):
        out.note(
            f"redis-cpu: {args.redis_cpu_nodes} nodes crawl {where}, seen cache "
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


def _crawls(out: Results, args: argparse.Namespace, url: str, prefix: str) -> None:
    """The crawl part (vanilla Scrapy, scrapy-redis and crawlfleet on the bundled site),
    each run's figures printed as it ends; then 4 nodes against 2, repeated."""
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
    if not scenarios:
        return
    results: list[CrawlResult] = []
    contenders = [("scrapy", 1)] + [("crawlfleet", n) for n in nodes]
    if args.quick:
        out.note("scrapy-redis is left out of the comparison with --quick")
    elif importlib.util.find_spec("scrapy_redis") is not None:
        contenders.append(("scrapy-redis", 1))
    else:
        out.note("scrapy-redis is not installed: left out of the comparison")
    for scenario in scenarios:
        extra = [("crawlfleet+pipeline", 1)] if scenario.name == "cpu-bound" else []
        runs = contenders + extra
        if scenario.name.startswith("latency-") and scenario.name != "latency-bound":
            runs = [("scrapy", 1), ("crawlfleet", 1)]
        for contender, n in runs:
            cap = args.scrapy_redis_cap if contender == "scrapy-redis" else None
            r = run_crawl(scenario, contender, n, redis_url=url, key_prefix=prefix, cap_seconds=cap)
            results.append(r)
            out.note(_crawl_line(r))
            out.report["crawl"] = [x.as_dict() for x in results]
            out.write()
    out.add("crawl", results, crawl_report(out.console, results))
    # 4 nodes must never be slower than 2: the first pair is in the table above, the
    # others are run now, in turn
    scaling = [r for r in results if r.scenario == "cpu-bound" and r.contender == "crawlfleet"]
    if "cpu" in args.skip or not {2, 4} <= set(nodes):
        return
    for i in range(1, args.repeats):
        for n in (2, 4):
            r = run_crawl(scenarios[0], "crawlfleet", n, redis_url=url, key_prefix=prefix)
            scaling.append(r)
            out.note(f"repeat {i + 1} of {args.repeats}: {_crawl_line(r)}")
    out.add("scaling", scaling, scaling_report(out.console, scaling))


def _crawl_line(r: CrawlResult) -> str:
    trips = f", {r.round_trips_per_page:.3f} round trips/page" if r.round_trips_per_page else ""
    exact = (
        "exact"
        if r.fetched_twice == r.never_fetched == 0
        else (f"{r.fetched_twice} fetched twice, {r.never_fetched} never")
    )
    return (
        f"{r.scenario}: {r.contender} x{r.nodes}: {r.pages_per_second:.0f} pages/s, "
        f"{r.cpu_ms_per_page:.2f} CPU ms/page{trips}, {r.seconds:.1f} s, {exact}"
    )


def _fault_trials(
    out: Results, args: argparse.Namespace, redis_url: str, prefix: str
) -> list[FaultResult]:
    """Run the fault trials into PostgreSQL when one answers, else into SQLite."""
    import tempfile

    postgres, why = find_postgres(args.items_postgres_url)
    workdir = Path(tempfile.mkdtemp(prefix="crawlfleet-faults-"))
    sql_url = postgres or f"sqlite:///{workdir / 'items.sqlite3'}"
    if postgres is None:
        out.note(f"fault trials into SQLite: {why}")
    results = []
    for n in range(args.fault_trials):
        fault = FAULTS[n % len(FAULTS)]
        out.note(f"fault trial {n + 1}/{args.fault_trials}: {fault} ...")
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
    out: Results, args: argparse.Namespace, redis_url: str, prefix: str
) -> OutageResult | None:
    """The store-outage trial (PostgreSQL down 30 s, a node killed 15 s in); None without
    a PostgreSQL (the outage is a proxy in front of it)."""
    import tempfile

    postgres, why = find_postgres(args.items_postgres_url)
    if postgres is None:
        out.note(f"no store-outage trial: {why}")
        return None
    out.note("store-outage trial: PostgreSQL down 30 s, a node killed 15 s in ...")
    workdir = Path(tempfile.mkdtemp(prefix="crawlfleet-outage-"))
    return run_outage_trial(
        postgres_url=postgres, redis_url=redis_url, workdir=workdir, key_prefix=prefix
    )


def _rates(text: str, option: str = "--polite-rates") -> list[int]:
    """The positive whole numbers of a comma-separated option; ConfigError naming it."""
    try:
        rates = [int(r) for r in text.split(",") if r.strip()]
    except ValueError:
        rates = []
    if not rates or min(rates) < 1:
        raise ConfigError(f"{option} must be positive whole numbers like 1,2, got {text!r}")
    return rates
