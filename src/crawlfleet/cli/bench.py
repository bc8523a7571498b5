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
repeat navigation links (or a real site: --redis-cpu-url). The real part (named with
--only and --real-url) crawls a real site with vanilla Scrapy, then with N nodes: CPU a
page, and with --real-rate the wall time against the bound pages/limit. The field part
(named with --only) runs polite crawls and a CPU-bound one with the nodes' Redis behind
a delaying proxy and beside CPU hogs, and reports what the site saw.
Each run's figures are printed as it ends, each part's table and targets when the part
ends, and the JSON file is rewritten after each part (``"complete": false`` until the
end), so a long run can be watched. ``--quick`` is a first look in about two minutes.
This module declares and checks the options; :mod:`crawlfleet.benchmark.suite` runs
the parts.
"""

from __future__ import annotations

import argparse
import compileall
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from rich.console import Console

import crawlfleet
from crawlfleet.benchmark.field import field_delays, field_hogs
from crawlfleet.benchmark.items import POSTGRES_URL_ENV
from crawlfleet.benchmark.results import Results
from crawlfleet.benchmark.suite import run_parts, whole_numbers
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
from crawlfleet.settings.config import redact_url

NAME = "bench"
#: The parts of the benchmark, in the order they run.
PARTS = [
    "cpu", "near", "latency", "polite", "field", "balance", "seen", "redis-cpu", "items", "faults",
    "manager", "freshness", "scale", "cluster", "real",
]  # fmt: skip
#: Parts that run only when named with --only (long; field starts CPU hogs; scale and
#: cluster on Redis servers of their own; real needs a site: --real-url).
OPT_IN = ("field", "freshness", "scale", "cluster", "real")
#: Parts that run on Redis servers of their own (the fleet's is not needed for them).
OWN_REDIS = ("scale", "cluster", "redis-cpu", "real")
#: How long the real part's site may take to answer a first request before the run.
REAL_CHECK_SECONDS = 10.0
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
            "runs of the CPU-bound crawl, in turn, by vanilla Scrapy and one node (the "
            "median ratios are the targets) and by 2 and 4 nodes (4 never slower than 2); "
            "of the real part's pairs (default 5)",
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
        Option(
            "--field-delays",
            str,
            "0,1,5,20,50",
            "field part: ms added per round trip between the nodes and Redis, one run "
            "each, 0 among them (default 0,1,5,20,50)",
        ),
        Option(
            "--field-hogs",
            str,
            "0,2x",
            "field part: busy-loop processes beside the nodes, one set of runs each: whole "
            "numbers, or kx for k times the cores (default 0,2x)",
        ),
        Option("--field-nodes", int, 4, "field part: nodes (default 4)"),
        Option(
            "--field-seconds",
            float,
            12.0,
            "field part: how long each polite run lasts at its budgets (default 12)",
        ),
        Option(
            "--field-pages",
            int,
            3000,
            "field part: pages of the CPU-bound crawl (default 3000)",
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
            "--freshness-seconds",
            float,
            120.0,
            "freshness part: the measured window of each policy (default 120)",
        ),
        Option(
            "--freshness-warmup",
            float,
            60.0,
            "freshness part: crawling before the window, each policy (default 60)",
        ),
        Option("--freshness-nodes", int, 2, "freshness part: nodes (default 2)"),
        Option("--freshness-pages", int, 40, "freshness part: content pages (default 40)"),
        Option(
            "--freshness-time-scale",
            float,
            20.0,
            "freshness part: site seconds per real second (default 20: the 'minute' pages "
            "change every 3 s)",
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
        Option(
            "--real-url",
            str,
            None,
            "real part: the start URL of a real site, crawled whole (its origin, or under "
            "--real-prefixes) by vanilla Scrapy, then by crawlfleet's nodes",
            metavar="URL",
        ),
        Option(
            "--real-prefixes",
            str,
            "",
            "real part: crawl only URLs under these prefixes (comma-separated; default: "
            "the start URL's origin)",
        ),
        Option("--real-nodes", int, 4, "real part: crawlfleet nodes (default 4)"),
        Option(
            "--real-rate",
            int,
            0,
            "real part: requests a second to the site, for both (vanilla: DOWNLOAD_DELAY; "
            "the nodes: one fleet budget); 0: no limit (default)",
        ),
    )
    parser.add_argument(
        "--real-launch",
        choices=("forked", "separate"),
        default="forked",
        help="real part: start the nodes as one command (crawlfleet crawl --processes "
        "N: forked once imported, as on one machine) or as N commands, each importing "
        "alone (default forked)",
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
        help="run only this part (repeat for several); 'field' (polite and CPU-bound "
        "crawls with Redis behind a delaying proxy and beside CPU hogs: 15 minutes at "
        "its defaults on a loaded 2-core machine), 'scale' (about 25 minutes and 3 GB of "
        "memory at its defaults, on a Redis of its own), 'cluster' (a few minutes, on a "
        "3-master Redis Cluster of its own) and 'real' (with --real-url) run only when "
        "named here; 'redis-cpu' runs on Redis servers of its own too",
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
    # 4 nodes crawl it in about 3 s: fewer pages and their start-up is most of the run
    "latency_pages": 400,
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
    "freshness_seconds": 40.0,
    "freshness_warmup": 20.0,
    "field_delays": "0,5,50",
    "field_seconds": 5.0,
    "field_pages": 1000,
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
    "manager_seconds", "freshness_seconds", "freshness_warmup", "freshness_nodes",
    "freshness_pages", "freshness_time_scale", "redis_cpu_pages", "redis_cpu_menu",
    "redis_cpu_nodes", "redis_cpu_url", "redis_cpu_cache", "redis_cpu_profile", "real_url",
    "real_prefixes", "real_nodes", "real_rate", "real_launch", "field_delays", "field_hogs",
    "field_nodes", "field_seconds", "field_pages", "only", "quick",
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


def _check_answers(url: str) -> None:
    """Fail at once, in one line, when the site at *url* does not answer HTTP (any
    status counts as an answer), not after two crawls of nothing. Credentials in the URL
    are left out of the check (urllib takes them for part of the host)."""
    parts = urllib.parse.urlsplit(url)
    bare = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    try:
        with urllib.request.urlopen(bare, timeout=REAL_CHECK_SECONDS):
            pass
    except urllib.error.HTTPError:
        pass  # it answered
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConfigError(f"--real-url {redact_url(url)} does not answer: {reason}") from None


def _command(args: argparse.Namespace) -> str:
    return "crawlfleet bench " + " ".join(
        f"--{k.replace('_', '-')}={v}"
        for k, values in sorted(vars(args).items())
        for v in (values if isinstance(values, list) else [values])
        if k in RECORDED and v not in (None, False)
    )


def _byte_compile() -> None:
    """Byte-compile crawlfleet's modules whose bytecode is missing or stale (a checkout
    edited since its install, or one run under PYTHONDONTWRITEBYTECODE): else every
    crawling process the benchmark starts compiles them again, about 0.15 s of CPU each
    at start, which an installed package never does. A package that cannot be written
    to is left as it is."""
    compileall.compile_dir(Path(crawlfleet.__file__).parent, quiet=2)


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
    if "freshness" not in args.skip:
        counts["freshness"] = (
            "freshness_seconds", "freshness_nodes", "freshness_pages", "freshness_time_scale"
        )  # fmt: skip
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
    if "field" not in args.skip:
        field_delays(args.field_delays)
        field_hogs(args.field_hogs)
        if args.field_nodes < 1 or args.field_pages < 1 or args.field_seconds <= 0:
            raise ConfigError(
                "--field-nodes and --field-pages must be at least 1, --field-seconds above 0"
            )
    if "polite" not in args.skip:
        whole_numbers(args.polite_rates)
        if max(whole_numbers(args.polite_jobs, "--polite-jobs")) > args.polite_nodes:
            raise ConfigError("--polite-jobs cannot be more than --polite-nodes")
    config = RedisConfig.from_settings(command_settings(args))
    if "redis-cpu" not in args.skip and min(args.redis_cpu_pages, args.redis_cpu_nodes) < 1:
        raise ConfigError("--redis-cpu-pages and --redis-cpu-nodes must be at least 1")
    if "real" not in args.skip:
        if not args.real_url or not args.real_url.startswith(("http://", "https://")):
            raise ConfigError(
                "the real part needs --real-url, an http(s) URL to start the crawl from "
                f"(given: {redact_url(args.real_url) if args.real_url else 'none'})"
            )
        if args.real_nodes < 1 or args.real_rate < 0:
            raise ConfigError("--real-nodes must be at least 1 and --real-rate at least 0")
        _check_answers(args.real_url)
    # some parts run on Redis servers of their own: the fleet's is needed for the others
    url = ""
    if set(PARTS) - set(args.skip) - set(OWN_REDIS):
        url = resolved_url(args, config)
        check_reachable(url)  # one line now, not after minutes of crawls that cannot start
    prefix = f"{config.key_prefix}bench"
    _byte_compile()
    out = Results(console, args.json, _command(args))
    out.note(f"parts: {', '.join(p for p in PARTS if p not in args.skip)}; figures in {args.json}")
    run_parts(out, args, url, prefix)
    out.finish()
    return 0 if out.targets_met else 1
