"""The order in which ``crawlfleet bench`` runs its parts, and how each part is driven
from the command's options (:mod:`crawlfleet.cli.bench` declares and checks them).

:func:`run_parts` runs every part that ``args.skip`` does not name, in the order of
:data:`crawlfleet.cli.bench.PARTS` (the crawls first: they set the CPU baseline the
others are read against), adding each part's results and report to *out* as the part
ends.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
from pathlib import Path

from crawlfleet.benchmark.balance import BalanceResult, run_balance
from crawlfleet.benchmark.cluster import run_cluster
from crawlfleet.benchmark.crawl import CrawlResult, Scenario, run_crawl
from crawlfleet.benchmark.faults import FAULTS, FaultResult, run_fault_trial
from crawlfleet.benchmark.field import (
    FieldCpuResult,
    FieldPoliteResult,
    field_delays,
    field_hogs,
    interrupt_on_sigterm,
    run_field_cpu,
    run_field_polite,
    set_ratios,
)
from crawlfleet.benchmark.freshness import POLICIES, FreshnessResult, run_freshness
from crawlfleet.benchmark.items import find_postgres, run_items
from crawlfleet.benchmark.manager import run_manager_bench
from crawlfleet.benchmark.outage import OutageResult, run_outage_trial
from crawlfleet.benchmark.polite import PoliteResult, run_polite
from crawlfleet.benchmark.realsite import RealSiteResult, run_real_site
from crawlfleet.benchmark.rediscpu import RedisCpuResult, run_redis_cpu
from crawlfleet.benchmark.reports import (
    balance_report,
    cluster_report,
    crawl_report,
    faults_report,
    field_cpu_report,
    field_polite_report,
    freshness_report,
    items_report,
    manager_report,
    outage_report,
    polite_report,
    real_report,
    redis_cpu_report,
    scale_report,
    scaling_report,
    seen_report,
    versus_report,
)
from crawlfleet.benchmark.results import Results
from crawlfleet.benchmark.scale import run_scale
from crawlfleet.benchmark.seenfilter import measure_seen
from crawlfleet.exceptions import ConfigError
from crawlfleet.settings.config import redact_url

__all__ = ["run_parts", "whole_numbers"]


def run_parts(out: Results, args: argparse.Namespace, url: str, prefix: str) -> None:
    """Run the parts *args* asks for against the fleet's Redis at *url* (keys under
    *prefix*; parts with a Redis of their own start it), recording each in *out*."""
    _crawls(out, args, url, prefix)
    if "polite" not in args.skip:
        polite: list[PoliteResult] = []
        for rate in whole_numbers(args.polite_rates):
            for jobs in whole_numbers(args.polite_jobs, "--polite-jobs"):
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
        out.add("polite", polite, polite_report(out.console, polite))
    if "field" not in args.skip:
        with interrupt_on_sigterm():
            _field(out, args, url, prefix)
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
        out.add("balance", balance, balance_report(out.console, balance))
    if "seen" not in args.skip:
        seen = []
        for mode, error in (("exact", 0.0), ("bloom", 1e-3), ("bloom", 1e-6)):
            out.note(f"seen-filter {mode} {error or ''} with {args.seen_urls} URLs ...")
            seen.append(
                measure_seen(
                    url, prefix, mode, args.seen_urls, error or 1e-3, probes=args.seen_urls
                )
            )
        out.add("seen", seen, seen_report(out.console, seen))
    if "redis-cpu" not in args.skip:
        redis_cpu = _redis_cpu(out, args)
        out.add("redis_cpu", redis_cpu, redis_cpu_report(out.console, redis_cpu))
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
        out.add("items", items, items_report(out.console, items))
    if "faults" not in args.skip:
        faults = _fault_trials(out, args, url, prefix)
        out.add("faults", faults, faults_report(out.console, faults))
        if args.quick:
            out.note("no store-outage trial with --quick (it takes over a minute)")
        else:
            outage = _outage_trial(out, args, url, prefix)
            if outage is not None:
                out.add("outage", outage, outage_report(out.console, outage))
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
        out.add("manager", crowd, manager_report(out.console, crowd))
    if "freshness" not in args.skip:
        fresh: list[FreshnessResult] = []
        for policy in POLICIES:
            out.note(
                f"freshness: {policy} revisits of a changing site, {args.freshness_nodes} "
                f"nodes, {args.freshness_warmup:g} s warm-up + {args.freshness_seconds:g} s ..."
            )
            fresh.append(
                run_freshness(
                    policy,
                    redis_url=url,
                    key_prefix=prefix,
                    nodes=args.freshness_nodes,
                    pages=args.freshness_pages,
                    time_scale=args.freshness_time_scale,
                    warmup=args.freshness_warmup,
                    seconds=args.freshness_seconds,
                )
            )
        out.add("freshness", fresh, freshness_report(out.console, fresh))
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
        out.add("scale", scale, scale_report(out.console, scale))
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
        out.add("cluster", cluster, cluster_report(out.console, cluster))
    if "real" not in args.skip:
        real: list[RealSiteResult] = []
        limit = f", {args.real_rate} requests/s" if args.real_rate else ""
        runs = [("scrapy", 1), ("crawlfleet", args.real_nodes)] * max(1, args.repeats)
        for k, (contender, nodes) in enumerate(runs):
            who = "vanilla Scrapy" if contender == "scrapy" else f"crawlfleet x{nodes}"
            turn = f" (pair {k // 2 + 1} of {len(runs) // 2})" if len(runs) > 2 else ""
            out.note(f"real: {who} crawls {redact_url(args.real_url)}{limit}{turn} ...")
            real.append(
                run_real_site(
                    args.real_url,
                    contender,
                    nodes=nodes,
                    rate=args.real_rate,
                    prefixes=args.real_prefixes,
                    server=args.scale_redis_server,
                    forked=args.real_launch == "forked",
                )
            )
        out.add("real", real, real_report(out.console, real))


def _field(out: Results, args: argparse.Namespace, url: str, prefix: str) -> None:
    """The field part: polite crawls, then a CPU-bound one, at each delay of Redis and
    each number of hogs (the 0-ms run first: the others are read against it)."""
    delays, hogs = field_delays(args.field_delays), field_hogs(args.field_hogs)
    nodes = args.field_nodes
    polite: list[FieldPoliteResult] = []
    for h in hogs:
        for delay in delays:
            out.note(
                f"field: polite, {nodes} nodes, Redis {delay:g} ms away, {h} hogs, "
                f"{args.field_seconds:g} s ..."
            )
            r = run_field_polite(
                delay,
                hogs=h,
                nodes=nodes,
                seconds=args.field_seconds,
                redis_url=url,
                key_prefix=prefix,
            )
            polite.append(r)
            uses = ", ".join(
                f"{x.host} {x.use:.1%} ({x.most_in_window}/{x.allowed})" for x in r.hosts
            )
            stopped = ", stopped at its time limit" if r.stopped else ""
            out.note(f"field polite {delay:g} ms, {h} hogs: {uses}, {r.late} given back{stopped}")
            out.report["field_polite"] = [x.as_dict() for x in polite]
            out.write()
    out.add("field_polite", polite, field_polite_report(out.console, polite))
    cpu: list[FieldCpuResult] = []
    for h in hogs:
        for delay in [*delays, 0.0] if len(delays) > 1 else delays:  # 0 ms before and after
            out.note(
                f"field: cpu-bound, {nodes} nodes, {args.field_pages} pages, Redis {delay:g} "
                f"ms away, {h} hogs ..."
            )
            c = run_field_cpu(
                delay, hogs=h, nodes=nodes, pages=args.field_pages, redis_url=url, key_prefix=prefix
            )
            cpu.append(c)
            out.note(
                f"field cpu-bound {delay:g} ms, {h} hogs: {c.pages_per_second:.0f} pages/s, "
                f"{c.fetched_twice} twice, {c.never_fetched} never"
            )
    set_ratios(cpu)
    out.add("field_cpu", cpu, field_cpu_report(out.console, cpu))


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
    if "cpu" in args.skip:
        return
    # on the CPU-bound site, run in turn --repeats times (the first run of each is in the
    # table above): one node against vanilla Scrapy, and 4 nodes against 2 (never slower)
    cpu_bound = [r for r in results if r.scenario == "cpu-bound"]
    one_node = [("scrapy", 1), ("crawlfleet", 1)] if 1 in nodes else []
    two_four = [("crawlfleet", 2), ("crawlfleet", 4)] if {2, 4} <= set(nodes) else []
    for i in range(1, args.repeats):
        for contender, n in one_node + two_four:
            r = run_crawl(scenarios[0], contender, n, redis_url=url, key_prefix=prefix)
            cpu_bound.append(r)
            out.note(f"repeat {i + 1} of {args.repeats}: {_crawl_line(r)}")
    for part, runs, report in (
        ("versus", one_node, versus_report),
        ("scaling", two_four, scaling_report),
    ):
        if runs:
            mine = [r for r in cpu_bound if (r.contender, r.nodes) in runs]
            out.add(part, mine, report(out.console, mine))


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
    postgres, why = find_postgres(args.items_postgres_url)
    if postgres is None:
        out.note(f"no store-outage trial: {why}")
        return None
    out.note("store-outage trial: PostgreSQL down 30 s, a node killed 15 s in ...")
    workdir = Path(tempfile.mkdtemp(prefix="crawlfleet-outage-"))
    return run_outage_trial(
        postgres_url=postgres, redis_url=redis_url, workdir=workdir, key_prefix=prefix
    )


def whole_numbers(text: str, option: str = "--polite-rates") -> list[int]:
    """The positive whole numbers of a comma-separated option; ConfigError naming it."""
    try:
        rates = [int(r) for r in text.split(",") if r.strip()]
    except ValueError:
        rates = []
    if not rates or min(rates) < 1:
        raise ConfigError(f"{option} must be positive whole numbers like 1,2, got {text!r}")
    return rates
