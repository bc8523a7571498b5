"""The benchmark's tables and targets: each part's figures printed as a table, and
the targets it checks (name -> met) returned for the JSON report."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from crawlfleet.benchmark.balance import BalanceResult, balance_targets
from crawlfleet.benchmark.cluster import ClusterResult
from crawlfleet.benchmark.crawl import CrawlResult
from crawlfleet.benchmark.faults import FaultResult
from crawlfleet.benchmark.freshness import FreshnessResult
from crawlfleet.benchmark.items import ItemsResult
from crawlfleet.benchmark.manager import ManagerResult
from crawlfleet.benchmark.outage import OutageResult
from crawlfleet.benchmark.polite import PoliteResult
from crawlfleet.benchmark.rediscpu import RedisCpuResult
from crawlfleet.benchmark.scale import ScaleResult

__all__ = [
    "balance_report",
    "crawl_report",
    "faults_report",
    "items_report",
    "manager_report",
    "outage_report",
    "polite_report",
    "redis_cpu_report",
    "scale_report",
    "scaling_report",
    "seen_report",
]


def _figures(title: str, columns: tuple[str, ...], *, left: tuple[str, ...] = ()) -> Table:
    """A table of figures called *title*: its *columns* right-aligned, but those in
    *left* (names, words)."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="left" if col in left else "right")
    return table


def scaling_report(console: Console, runs: list[CrawlResult]) -> dict[str, bool]:
    """The CPU-bound crawl with 2 and 4 nodes, run in turn: 4 never slower than 2."""
    twos = [r.pages_per_second for r in runs if r.nodes == 2]
    fours = [r.pages_per_second for r in runs if r.nodes == 4]
    table = _figures(
        "cpu-bound: 2 against 4 nodes, run in turn",
        ("repeat", "2 nodes pages/s", "4 nodes pages/s", "4 / 2"),
    )
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


def faults_report(console: Console, results: list[FaultResult]) -> dict[str, bool]:
    store = results[0].store
    table = _figures(
        f"fault trials: 3 nodes storing into {store}, one node hit at random",
        (
            "fault",
            "hit at page",
            "rows",
            "never fetched",
            "items lost",
            "duplicate rows",
            "fetched twice",
            "seconds",
            "exit codes",
        ),
        left=("fault",),
    )
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


def outage_report(console: Console, r: OutageResult) -> dict[str, bool]:
    """The store-outage trial: nothing lost, and a kill during the outage costs at most
    the killed node's bound plus what it had in flight in pages fetched again."""
    table = _figures(
        f"store outage: {r.store} down {r.outage_seconds:.0f} s, a node killed "
        f"{r.kill_after_seconds:.0f} s in (CRAWLFLEET_ITEMS_PENDING_MAX {r.pending_max})",
        (
            "pages",
            "rows",
            "fetched down/kill/back",
            "killed node held",
            "fetched again",
            "bound",
            "recovery counts",
            "seconds",
        ),
    )
    table.add_row(
        str(r.pages),
        str(r.rows),
        f"{r.fetched_at_down}/{r.fetched_at_kill}/{r.fetched_at_back}",
        f"{r.victim_held} ({escape(r.victim_state)})",
        str(r.fetched_again),
        str(r.refetch_bound),
        " ".join(str(n) for n in r.recovery_counts),
        f"{r.seconds:.1f}",
    )
    console.print(table)
    lost = r.never_fetched + r.items_lost + r.duplicate_rows
    return {
        f"outage: 0 pages or items lost, no row twice (seen {lost})": lost == 0,
        f"outage: pages fetched again <= bound + in flight ({r.fetched_again} <= "
        f"{r.refetch_bound})": r.fetched_again <= r.refetch_bound,
        "outage: every other node finished": all(c == 0 for c in r.exit_codes[1:]),
    }


def balance_report(console: Console, results: list[BalanceResult]) -> dict[str, bool]:
    table = _figures(
        "load balancing (measured by the site, per node label)",
        ("case", "seconds", "ideal s", "node", "pages", "share", "pages/s", "first s"),
        left=("case", "node"),
    )
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


#: Scale targets: bytes per URL of a Bloom filter at 1e-3, bytes per queued request.
BLOOM_BYTES_PER_URL_MAX = 2.1
QUEUED_BYTES_MAX = 150
#: A job sharded over a 3-master cluster: at least this many times the capacity of one
#: shard, and no master doing more than this share of its work.
CLUSTER_GAIN_MIN = 1.8
CLUSTER_BUSIEST_MAX = 0.5


def scale_report(console: Console, r: ScaleResult) -> dict[str, bool]:
    """The scale part: memory per URL and per queued request on one Redis, and rates."""
    table = _figures(
        f"scale: one Redis ({r.redis_version}) of the run's own",
        ("what", "how many", "bytes each", "per second", "Redis CPU µs each", "notes"),
    )
    table.add_row(
        f"Bloom filter at {r.bloom_error_rate:g}",
        f"{r.bloom_urls:,}",
        f"{r.bloom_bytes_per_url:.2f}",
        f"{r.bloom_adds_per_second:,.0f} adds",
        f"{r.redis_us_per_url_added:.2f}",
        f"{r.bloom_layers} layer(s), false positives {r.bloom_false_positive_rate:.2e}",
    )
    table.add_row(
        "queued requests",
        f"{r.queued:,}",
        f"{r.queued_bytes_per_request:.1f}",
        f"{r.enqueued_per_second:,.0f} queued",
        f"{r.redis_us_per_queued:.2f}",
        f"{r.sites:,} sites, URLs of {r.url_chars:.0f} chars, requests of "
        f"{r.payload_bytes:.0f} B encoded",
    )
    table.add_row(
        "leased, then acknowledged",
        f"{r.leased:,}",
        "",
        f"{r.leased_per_second:,.0f} leased, {r.acked_per_second:,.0f} acked",
        f"{r.redis_us_per_leased:.2f} + {r.redis_us_per_acked:.2f}",
        f"peak used memory {r.used_memory_peak_bytes / 2**30:.2f} GiB",
    )
    console.print(table)
    return {
        f"scale: Bloom filter <= {BLOOM_BYTES_PER_URL_MAX} B/URL at 1e-3 "
        f"(measured {r.bloom_bytes_per_url:.2f})": r.bloom_bytes_per_url <= BLOOM_BYTES_PER_URL_MAX,
        f"scale: Bloom false positives <= {r.bloom_error_rate:g} "
        f"(measured {r.bloom_false_positive_rate:.2e})": r.bloom_false_positive_rate
        <= r.bloom_error_rate,
        f"scale: <= {QUEUED_BYTES_MAX} B per queued request "
        f"(measured {r.queued_bytes_per_request:.1f})": r.queued_bytes_per_request
        <= QUEUED_BYTES_MAX,
    }


#: Redis main-thread CPU per crawled page the redis-cpu part allows, with the cache on.
REDIS_US_PER_PAGE_MAX = 60.0


def redis_cpu_report(console: Console, results: list[RedisCpuResult]) -> dict[str, bool]:
    """The redis-cpu part: Redis CPU per crawled page with the nodes' seen cache on and
    off (runs in pairs, on one site each)."""
    table = Table(title="redis-cpu: Redis main-thread CPU per crawled page (a Redis of its own)")
    columns = (
        "site",
        "nodes",
        "seen cache",
        "pages",
        "Redis µs/page",
        "scripts/page",
        "seen checks/page",
        "cache hit rate",
        "twice",
        "leases re-issued",
        "missed",
    )
    for col in columns:
        table.add_column(col, justify="left" if col == "site" else "right")
    targets: dict[str, bool] = {}
    for r in results:
        checks = r.calls_per_page.get("sadd", 0.0) + r.calls_per_page.get("bitfield", 0.0)
        table.add_row(
            escape(r.site),
            str(r.nodes),
            f"{r.cache_size:,}" if r.cache_size else "off",
            f"{r.pages:,}",
            f"{r.redis_us_per_page:.1f}",
            f"{r.script_calls_per_page:.3f}",
            f"{checks:.2f}",
            f"{r.hit_rate:.1%}" if r.cache_size else "",
            str(r.fetched_twice),
            str(r.reclaimed),
            str(r.never_fetched) if r.never_fetched >= 0 else "?",
        )
        label = f"redis-cpu {r.site}, cache {r.cache_size or 'off'}"
        # a lease re-issued (its node taken for dead) may be fetched twice: invariant 2
        targets[f"{label}: every page, none twice but re-issued leases"] = (
            r.fetched_twice <= r.reclaimed and r.never_fetched <= 0 and r.pages > 0
        )
        if r.cache_size:
            targets[
                f"{label}: <= {REDIS_US_PER_PAGE_MAX:g} µs Redis CPU per page "
                f"(measured {r.redis_us_per_page:.1f})"
            ] = r.redis_us_per_page <= REDIS_US_PER_PAGE_MAX
    console.print(table)
    for on, off in zip(results[::2], results[1::2], strict=False):
        if on.redis_us_per_page and off.redis_us_per_page:
            console.print(
                f"{escape(on.site)}: Redis CPU per page with the cache / without "
                f"{on.redis_us_per_page / off.redis_us_per_page:.2f}"
            )
    return targets


def cluster_report(console: Console, results: list[ClusterResult]) -> dict[str, bool]:
    """The cluster part: one job in one shard, then in several, on a 3-master cluster."""
    table = _figures(
        f"cluster: one job on a Redis Cluster of {results[0].masters} masters",
        (
            "shards",
            "queued",
            "leased",
            "Redis CPU µs: queue + lease + ack",
            "CPU share per master",
            "capacity/s",
            "one client: queued/s, leased/s, acked/s",
        ),
    )
    for r in results:
        table.add_row(
            str(r.shards),
            f"{r.queued:,}",
            f"{r.leased:,}",
            f"{r.redis_us_per_queued:.1f} + {r.redis_us_per_leased:.1f} + "
            f"{r.redis_us_per_acked:.1f}",
            " / ".join(f"{share:.0%}" for share in r.master_shares),
            f"{r.capacity_per_second:,.0f}",
            f"{r.enqueued_per_second:,.0f}, {r.leased_per_second:,.0f}, {r.acked_per_second:,.0f}",
        )
    console.print(table)
    console.print(
        "capacity: requests a second (each queued, leased and acknowledged once) before the "
        "busiest master's thread is full"
    )
    one, sharded = results[0], results[-1]
    gain = sharded.capacity_per_second / one.capacity_per_second
    return {
        f"cluster: {sharded.shards} shards serve >= {CLUSTER_GAIN_MIN}x one shard's capacity "
        f"on {one.masters} masters (measured {gain:.2f}x)": gain >= CLUSTER_GAIN_MIN,
        f"cluster: the busiest master does <= {CLUSTER_BUSIEST_MAX:.0%} of a sharded job's "
        f"Redis work (measured {max(sharded.master_shares):.0%})": max(sharded.master_shares)
        <= CLUSTER_BUSIEST_MAX,
    }


def freshness_report(console: Console, results: list[FreshnessResult]) -> dict[str, bool]:
    """The freshness runs: changes picked up in time, fetches spent on unchanged pages,
    304s, and new versions of pages that changed only in a timestamp."""
    table = _figures(
        "freshness: a changing site kept fresh by a continuous job (site's counts, window)",
        (
            "policy",
            "nodes",
            "budget/s",
            "fetches/s",
            "unchanged/s",
            "picked up in 2x",
            "missed",
            "delay p50 s",
            "304 share",
            "stamp versions",
        ),
        left=("policy",),
    )
    targets: dict[str, bool] = {}
    for r in results:
        share = r.on_time_share
        delays = r.total.get("delay_seconds") or {}
        table.add_row(
            r.policy,
            str(r.nodes),
            f"{r.rate_limit:g}",
            f"{r.fetches_per_second:.1f}",
            f"{r.unchanged_per_second:.1f}",
            "-" if share is None else f"{share:.1%}",
            str(r.total.get("missed", 0)),
            "-" if delays.get("median") is None else f"{delays['median']:.2f}",
            "-" if r.validators_304_share is None else f"{r.validators_304_share:.0%}",
            str(r.versions.get("stamp", 0)),
        )
        targets[f"freshness {r.policy}: >= 95% of changes picked up within 2 intervals"] = (
            share is not None and share >= 0.95
        )
        targets[f"freshness {r.policy}: no new version of timestamp-only pages"] = (
            r.versions.get("stamp", 0) == 0
        )
        targets[f"freshness {r.policy}: 304s used where the site sends validators"] = bool(
            r.validators_304_share
        )
    fixed = next((r for r in results if r.policy == "fixed"), None)
    adaptive = next((r for r in results if r.policy == "adaptive"), None)
    if fixed and adaptive and fixed.unchanged_per_second > 0:
        saved = 1 - adaptive.unchanged_per_second / fixed.unchanged_per_second
        targets[
            f"freshness: adaptive spends >= 50% fewer fetches on unchanged pages than fixed "
            f"(measured {saved:.0%} fewer)"
        ] = saved >= 0.5
    console.print(table)
    return targets


def polite_report(console: Console, results: list[PoliteResult]) -> dict[str, bool]:
    """The politeness runs: the site's own counts against each limit, and how much of
    the budget each used."""
    table = _figures(
        "politeness: one site, its limit shared by every node of every job (site's counts)",
        (
            "limit/s",
            "nodes",
            "jobs",
            "pages",
            "seconds",
            "achieved/s",
            "budget use",
            "most in 1 s",
            "slots missed",
            "jobs done at",
        ),
    )
    targets: dict[str, bool] = {}
    for r in results:
        table.add_row(
            str(r.rate),
            str(r.nodes),
            str(r.jobs),
            str(r.pages),
            f"{r.seconds:.2f}",
            f"{r.achieved:.1f}",
            f"{r.use:.1%}",
            str(r.max_1s),
            str(r.late),
            " / ".join(f"{at:.0%}" for at in r.job_done_at) if r.jobs > 1 else "",
        )
        label = f"polite {r.rate}/s x{r.nodes}" + (f" in {r.jobs} jobs" if r.jobs > 1 else "")
        targets[f"{label}: never over the limit in any 1 s window (most {r.max_1s})"] = (
            r.max_1s <= r.rate
        )
        targets[f"{label}: budget use >= 95% (measured {r.use:.1%})"] = r.use >= 0.95
        targets[f"{label}: exact"] = r.fetched_twice == 0 and r.never_fetched == 0
        if r.jobs > 1:
            # equal work each: sharing the budget fairly, every job ends near the end
            first = min(r.job_done_at, default=0.0)
            targets[f"{label}: every job progresses (first done at {first:.0%} of the run)"] = (
                first >= 0.75
            )
    console.print(table)
    return targets


def crawl_report(console: Console, results: list[CrawlResult]) -> dict[str, bool]:
    """Print the crawl throughput table; return its targets."""
    table = _figures(
        "crawl throughput (measured by the site)",
        (
            "scenario",
            "contender",
            "nodes",
            "pages/s",
            "x scrapy",
            "x 1 node",
            "round trips/page",
            "CPU ms/page",
            "x scrapy CPU",
            "start-up CPU s",
            "crawl CPU ms/page",
            "twice",
            "never",
            "node shares",
        ),
        left=("scenario", "contender"),
    )
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
            f"{r.startup_cpu_seconds:.2f}",
            f"{r.crawl_cpu_ms_per_page:.2f}",
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
    return targets


def seen_report(console: Console, seen: list[Any]) -> dict[str, bool]:
    """Print the seen-filter memory table; return its targets."""
    targets: dict[str, bool] = {}
    if seen:
        mem = _figures(
            "seen-filter memory",
            (
                "mode",
                "error rate",
                "URLs",
                "bytes/URL",
                "layers",
                "measured FP rate",
                "insert s",
            ),
        )
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
    return targets


def items_report(console: Console, items: ItemsResult) -> dict[str, bool]:
    """Print the item pipeline tables; return their targets."""
    table = _figures(
        f"item pipeline: every stage + one store, {items.items} product items",
        ("into", "items", "seconds", "items/s", "stored", "note"),
        left=("into", "note"),
    )
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


def manager_report(console: Console, r: ManagerResult) -> dict[str, bool]:
    """Print the manager-under-a-crowd table; return its targets."""
    table = _figures(
        f"manager: {r.clients} clients + {r.streams} live streams, {r.jobs} jobs of "
        f"{r.nodes // max(1, r.jobs)} nodes, {r.seconds:.0f} s",
        (
            "requests/s",
            "p50 ms",
            "p99 ms",
            "5xx",
            "other errors",
            "CPU ms/request",
            "CPU cores",
            "stream gap median s",
            "stream gap max s",
        ),
    )
    table.add_row(
        f"{r.requests_per_second:,.0f}",
        f"{r.p50_ms:.1f}",
        f"{r.p99_ms:.1f}",
        str(r.errors_5xx),
        str(r.errors_other),
        f"{r.cpu_ms_per_request:.3f}",
        f"{r.cpu_cores:.2f}",
        f"{r.stream_gap_median_s:.2f}",
        f"{r.stream_gap_max_s:.2f}",
    )
    console.print(table)
    return {
        f"manager: >= 500 requests/s (measured {r.requests_per_second:,.0f})": (
            r.requests_per_second >= 500
        ),
        f"manager: p99 < 100 ms (measured {r.p99_ms:.0f})": r.p99_ms < 100,
        f"manager: every stream updated every second (longest gap {r.stream_gap_max_s:.2f} s)": (
            0 < r.stream_gap_max_s <= 1.5
        ),
        f"manager: no 5xx (seen {r.errors_5xx})": r.errors_5xx == 0 and r.requests > 0,
    }
