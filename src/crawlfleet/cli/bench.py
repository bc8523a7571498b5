"""``crawlfleet bench``: crawlfleet against vanilla Scrapy on the bundled site.

Runs, in one invocation: vanilla Scrapy and crawlfleet with 1, 2 and 4 nodes on a
CPU-bound site (no latency) and on a latency-bound one; then the seen-filter's memory
per URL (exact and Bloom) and the Bloom filter's measured false-positive rate; then the
item pipeline: items/s into each store (SQLite, PostgreSQL when one answers, the Redis
stream, an item worker moving the stream into SQLite), text-extraction quality and
legacy-encoding correctness on the bundled site; then fault trials (nodes storing into
SQL killed with SIGKILL or a double Ctrl-C at random moments: nothing may be lost).
Prints tables and writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from crawlfleet.benchmark.balance import BalanceResult, balance_targets, run_balance
from crawlfleet.benchmark.crawl import CrawlResult, Scenario, run_crawl
from crawlfleet.benchmark.faults import FAULTS, FaultResult, run_fault_trial
from crawlfleet.benchmark.items import POSTGRES_URL_ENV, ItemsResult, find_postgres, run_items
from crawlfleet.benchmark.memory import measure_seen
from crawlfleet.benchmark.polite import PoliteResult, run_polite
from crawlfleet.cli.options import (
    add_redis_options,
    add_settings_option,
    check_reachable,
    command_settings,
    resolved_url,
)
from crawlfleet.exceptions import ConfigError
from crawlfleet.settings.config import RedisConfig

NAME = "bench"
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
        "--skip",
        action="append",
        default=[],
        choices=["cpu", "near", "latency", "polite", "balance", "seen", "items", "faults"],
        help="leave out a part",
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
    if "items" not in args.skip and (args.items < 1 or args.items_site_pages < 3):
        console.print("[red]--items must be >= 1 and --items-site-pages >= 3[/]")
        return 2
    config = RedisConfig.from_settings(command_settings(args))
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
    else:
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
            console.print(f"polite: crawlfleet x{args.polite_nodes}, one site limited to {rate}/s")
            polite.append(
                run_polite(
                    rate,
                    seconds=args.polite_seconds,
                    nodes=args.polite_nodes,
                    redis_url=url,
                    key_prefix=prefix,
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
    if "faults" not in args.skip:
        faults = _fault_trials(console, args, url, prefix)
    report = _report(console, results, seen, items)
    if scaling:
        _add_part(console, report, "scaling", scaling, _scaling_report(console, scaling))
    if polite:
        _add_part(console, report, "polite", polite, _polite_report(console, polite))
    if balance:
        _add_part(console, report, "balance", balance, _balance_report(console, balance))
    if faults:
        _add_part(console, report, "faults", faults, _faults_report(console, faults))
    report["command"] = "crawlfleet bench " + " ".join(
        f"--{k.replace('_', '-')}={v}"
        for k, v in sorted(vars(args).items())
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
            "balance_pages",
            "balance_latency",
            "fault_trials",
            "fault_pages",
        )
    )
    report["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    args.json.write_text(json.dumps(report, indent=2))
    console.print(f"figures written to {args.json}")
    return 0 if report["targets_met"] else 1


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


def _add_part(
    console: Console, report: dict[str, Any], key: str, rows: list[Any], targets: dict[str, bool]
) -> None:
    """Add a part's *rows* and *targets* to *report*, and print the targets."""
    report[key] = [r.as_dict() for r in rows]
    report["targets"].update(targets)
    for name, ok in targets.items():
        console.print(f"{'[green]met[/]' if ok else '[red]MISSED[/]'}  {name}")
    report["targets_met"] = all(report["targets"].values())


def _scaling_report(console: Console, runs: list[CrawlResult]) -> dict[str, bool]:
    """The CPU-bound crawl with 2 and 4 nodes, run in turn: 4 never slower than 2."""
    twos = [r.pages_per_second for r in runs if r.nodes == 2]
    fours = [r.pages_per_second for r in runs if r.nodes == 4]
    table = Table(title="cpu-bound: 2 against 4 nodes, run in turn")
    for col in ("repeat", "2 nodes pages/s", "4 nodes pages/s", "4 / 2"):
        table.add_column(col, justify="right")
    pairs = list(zip(twos, fours, strict=False))
    for i, (two, four) in enumerate(pairs, 1):
        table.add_row(str(i), f"{two:.0f}", f"{four:.0f}", f"{four / two:.2f}")
    console.print(table)
    if not pairs:
        return {}
    held = sum(1 for two, four in pairs if four >= two)
    return {
        f"cpu-bound: 4 nodes >= 2 nodes in every repeat ({held} of {len(pairs)})": held
        == len(pairs)
    }


def _faults_report(console: Console, results: list[FaultResult]) -> dict[str, bool]:
    store = results[0].store
    table = Table(title=f"fault trials: 3 nodes storing into {store}, one node hit at random")
    for col in (
        "fault",
        "hit at page",
        "rows",
        "never fetched",
        "items lost",
        "duplicate rows",
        "fetched twice",
        "seconds",
        "exit codes",
    ):
        table.add_column(col, justify="left" if col == "fault" else "right")
    for r in results:
        table.add_row(
            r.fault,
            f"{r.hit_at}/{r.pages}",
            str(r.rows),
            str(r.never_fetched),
            str(r.items_lost),
            str(r.duplicate_rows),
            str(r.fetched_twice),
            f"{r.seconds:.1f}",
            " ".join(str(c) for c in r.exit_codes),
        )
    console.print(table)
    lost = sum(r.never_fetched for r in results)
    items = sum(r.items_lost for r in results)
    dups = sum(r.duplicate_rows for r in results)
    unfinished = sum(1 for r in results if any(c != 0 for c in r.exit_codes[1:]))
    return {
        f"faults: {len(results)} trials, 0 pages lost (seen {lost})": lost == 0,
        f"faults: 0 items lost (seen {items})": items == 0,
        f"faults: 0 duplicate rows (seen {dups})": dups == 0,
        f"faults: every other node finished (seen {unfinished} trials with one that did not)": (
            unfinished == 0
        ),
    }


def _balance_report(console: Console, results: list[BalanceResult]) -> dict[str, bool]:
    table = Table(title="load balancing (measured by the site, per node label)")
    for col in ("case", "seconds", "ideal s", "node", "pages", "share", "pages/s", "first s"):
        table.add_column(col, justify="left" if col in ("case", "node") else "right")
    for r in results:
        t0 = min((v["first"] for v in r.nodes.values()), default=0.0)
        for i, (label, v) in enumerate(sorted(r.nodes.items())):
            table.add_row(
                r.case if i == 0 else "",
                f"{r.seconds:.1f}" if i == 0 else "",
                f"{r.ideal_seconds:.1f}" if i == 0 and r.ideal_seconds else "",
                label,
                str(int(v["requests"])),
                f"{v['share']:.1%}",
                f"{v['rate']:.1f}",
                f"{v['first'] - t0:.1f}",
            )
    console.print(table)
    for r in results:
        console.print(
            f"{r.case}: fetched twice {r.fetched_twice}, never fetched {r.never_fetched}, "
            f"exit codes {r.exit_codes}"
            + (f", join delay {r.join_delay_seconds:.1f}s" if r.join_delay_seconds else "")
            + (f", slow tail {r.slow_tail_seconds:+.2f}s" if r.slow_tail_seconds else "")
        )
    return balance_targets(results)


def _rates(text: str) -> list[int]:
    try:
        rates = [int(r) for r in text.split(",") if r.strip()]
    except ValueError:
        rates = []
    if not rates or min(rates) < 1:
        raise ConfigError(f"--polite-rates must be requests/s like 5,50,500, got {text!r}")
    return rates


def _polite_report(console: Console, results: list[PoliteResult]) -> dict[str, bool]:
    """The politeness runs: the site's own counts against each limit, and how much of
    the budget each used."""
    table = Table(title="politeness: one site, its limit shared by every node (site's counts)")
    for col in ("limit/s", "nodes", "pages", "seconds", "achieved/s", "budget use", "most in 1 s"):
        table.add_column(col, justify="right")
    table.add_column("slots missed", justify="right")
    targets: dict[str, bool] = {}
    for r in results:
        table.add_row(
            str(r.rate),
            str(r.nodes),
            str(r.pages),
            f"{r.seconds:.2f}",
            f"{r.achieved:.1f}",
            f"{r.use:.1%}",
            str(r.max_1s),
            str(r.late),
        )
        label = f"polite {r.rate}/s x{r.nodes}"
        targets[f"{label}: never over the limit in any 1 s window (most {r.max_1s})"] = (
            r.max_1s <= r.rate
        )
        targets[f"{label}: budget use >= 95% (measured {r.use:.1%})"] = r.use >= 0.95
        targets[f"{label}: exact"] = r.fetched_twice == 0 and r.never_fetched == 0
    console.print(table)
    return targets


def _report(
    console: Console, results: list[CrawlResult], seen: list[Any], items: ItemsResult | None = None
) -> dict[str, Any]:
    table = Table(title="crawl throughput (measured by the site)")
    for col in (
        "scenario",
        "contender",
        "nodes",
        "pages/s",
        "x scrapy",
        "x 1 node",
        "round trips/page",
        "CPU ms/page",
        "x scrapy CPU",
        "twice",
        "never",
        "node shares",
    ):
        table.add_column(col, justify="left" if col in ("scenario", "contender") else "right")
    targets: dict[str, bool] = {}
    for r in results:
        base = next(
            (b for b in results if b.scenario == r.scenario and b.contender == "scrapy"), None
        )
        one = next(
            (
                b
                for b in results
                if b.scenario == r.scenario and b.contender == "crawlfleet" and b.nodes == 1
            ),
            None,
        )
        vs_scrapy = r.pages_per_second / base.pages_per_second if base else None
        cpu_vs = (
            r.cpu_ms_per_page / base.cpu_ms_per_page
            if base and base.cpu_ms_per_page and r.cpu_ms_per_page
            else None
        )
        vs_one = r.pages_per_second / one.pages_per_second if one else None
        label = r.contender
        if r.capped_seconds:
            label += f" (stopped at {r.capped_seconds:.0f}s)"
        table.add_row(
            r.scenario,
            label,
            str(r.nodes),
            f"{r.pages_per_second:.0f}",
            f"{vs_scrapy:.2f}" if vs_scrapy else "",
            f"{vs_one:.2f}" if vs_one and r.contender.startswith("crawlfleet") else "",
            f"{r.round_trips_per_page:.3f}" if r.round_trips_per_page is not None else "",
            f"{r.cpu_ms_per_page:.2f}",
            f"{cpu_vs:.2f}" if cpu_vs is not None else "",
            str(r.fetched_twice),
            str(r.never_fetched),
            " ".join(f"{s:.0%}" for s in r.node_shares),
        )
        if r.contender == "scrapy-redis":
            continue  # a comparison, not a target of ours
        targets[f"{r.scenario}/{r.contender} x{r.nodes}: exact"] = (
            r.fetched_twice == 0 and r.never_fetched == 0
        )
        if r.contender.startswith("crawlfleet"):
            targets[f"{r.scenario}/{r.contender} x{r.nodes}: round trips/page < 1"] = (
                r.round_trips_per_page or 0
            ) < 1
        if r.contender == "crawlfleet+pipeline" and one is not None:
            cost = 1 - r.pages_per_second / one.pages_per_second
            targets[f"item pipeline costs the crawl < 15% (measured {cost:.0%})"] = cost < 0.15
        plain = r.contender == "crawlfleet"
        if plain and r.nodes == 1 and vs_scrapy is not None and r.scenario != "latency-bound":
            targets[f"{r.scenario}: 1 node >= 0.95x vanilla Scrapy's pages/s"] = vs_scrapy >= 0.95
            if cpu_vs is not None:
                targets[f"{r.scenario}: 1 node <= 1.05x vanilla Scrapy's CPU/page"] = cpu_vs <= 1.05
        if plain and r.nodes == 4 and vs_one is not None and r.scenario == "latency-bound":
            targets["latency-bound: 4 nodes >= 3.5x 1 node"] = vs_one >= 3.5
    if results:
        console.print(table)
    if seen:
        mem = Table(title="seen-filter memory")
        for col in (
            "mode",
            "error rate",
            "URLs",
            "bytes/URL",
            "layers",
            "measured FP rate",
            "insert s",
        ):
            mem.add_column(col, justify="right")
        for s in seen:
            mem.add_row(
                s.mode,
                f"{s.error_rate:g}" if s.error_rate else "",
                str(s.urls),
                f"{s.bytes_per_url:.2f}",
                str(s.layers or ""),
                f"{s.false_positive_rate:.2e}" if s.false_positive_rate is not None else "",
                f"{s.insert_seconds:.1f}",
            )
            if s.mode == "bloom" and s.error_rate == 1e-3:
                targets["bloom 1e-3: <= 2.5 bytes/URL"] = s.bytes_per_url <= 2.5
            if s.mode == "bloom" and s.false_positive_rate is not None and s.error_rate:
                # the measured rate of a sample: allow the sampling noise of a few hits
                limit = s.error_rate * 1.2 + 5 / s.urls
                targets[f"bloom {s.error_rate:g}: FP rate within target"] = (
                    s.false_positive_rate <= limit
                )
        console.print(mem)
    if items is not None:
        targets.update(_items_report(console, items))
    for name, ok in targets.items():
        console.print(f"{'[green]met[/]' if ok else '[red]MISSED[/]'}  {name}")
    return {
        "crawl": [r.as_dict() for r in results],
        "seen": [s.as_dict() for s in seen],
        "items": items.as_dict() if items is not None else None,
        "targets": targets,
        "targets_met": all(targets.values()),
    }


def _items_report(console: Console, items: ItemsResult) -> dict[str, bool]:
    """Print the item pipeline tables; return their targets."""
    table = Table(title=f"item pipeline: every stage + one store, {items.items} product items")
    for col in ("into", "items", "seconds", "items/s", "stored", "note"):
        table.add_column(col, justify="left" if col in ("into", "note") else "right")
    for run in items.runs:
        if run.skipped is not None:
            table.add_row(run.target, str(run.items), "", "", "", f"skipped: {escape(run.skipped)}")
            continue
        note = "" if run.complete else "[red]items missing[/]"
        table.add_row(
            run.target,
            str(run.items),
            f"{run.seconds:.2f}" if run.seconds is not None else "",
            f"{run.items_per_second:,.0f}" if run.items_per_second is not None else "",
            str(run.stored) if run.stored is not None else "",
            note,
        )
    console.print(table)
    ex, enc = items.extraction, items.encoding
    quality = Table(title=f"item quality on the bundled site ({items.site_pages} pages)")
    quality.add_column("check")
    quality.add_column("result", justify="right")
    quality.add_row(
        f"extraction token F1 ({ex.articles} article pages)",
        f"mean {ex.mean_f1:.3f}, min {ex.min_f1:.3f}"
        + (f" (page {ex.worst_page})" if ex.worst_page is not None else ""),
    )
    quality.add_row("extraction speed (one thread)", f"{ex.pages_per_second:,.0f} pages/s")
    quality.add_row(f"encoding ({enc.pages} non-UTF-8 pages)", f"{enc.correct}/{enc.pages} correct")
    console.print(quality)
    for failure in enc.failures:
        console.print(f"[red]encoding wrong[/] {escape(str(failure))}")
    ran = [run for run in items.runs if run.skipped is None]
    return {
        f"items: every store holds all {items.items} items": all(r.complete for r in ran),
        f"extraction F1 >= 0.9 (min over {ex.articles} articles)": (
            ex.articles > 0 and ex.min_f1 >= 0.9
        ),
        f"encoding: all {enc.pages} non-UTF-8 pages correct": (
            enc.pages > 0 and enc.correct == enc.pages
        ),
    }
