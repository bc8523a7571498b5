"""The benchmark's reports of crawl speed and politeness: throughput against vanilla
Scrapy, nodes against nodes, rate limits kept and used, load balance. Each prints its
part's figures as a table and returns the targets it checks (name -> met) for the JSON
report."""

from __future__ import annotations

import math
import statistics

from rich.console import Console

from crawlfleet.benchmark.balance import BalanceResult, balance_targets
from crawlfleet.benchmark.crawl import CrawlResult
from crawlfleet.benchmark.polite import PoliteResult
from crawlfleet.benchmark.realsite import RealSiteResult
from crawlfleet.benchmark.reports.tables import figures

#: A real site crawled by N nodes: CPU a page at most this many times vanilla Scrapy's.
REAL_CPU_RATIO_MAX = 1.2
#: ... and, at a rate limit, the wall time at most this many times the bound pages/limit.
REAL_WALL_RATIO_MAX = 1.10

__all__ = [
    "balance_report",
    "crawl_report",
    "polite_report",
    "real_report",
    "scaling_report",
    "versus_report",
]


def scaling_report(console: Console, runs: list[CrawlResult]) -> dict[str, bool]:
    """The CPU-bound crawl with 2 and 4 nodes, run in turn: 4 never slower than 2."""
    twos = [r.pages_per_second for r in runs if r.nodes == 2]
    fours = [r.pages_per_second for r in runs if r.nodes == 4]
    table = figures(
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


def versus_report(console: Console, runs: list[CrawlResult]) -> dict[str, bool]:
    """The CPU-bound crawl by vanilla Scrapy and one node, run in turn: in each pair the
    node's pages/s and CPU a page over Scrapy's; the targets are on the medians of those
    ratios (a shared machine's noise moves both runs of a pair alike, not the ratio)."""
    scrapy = [r for r in runs if r.contender == "scrapy"]
    ones = [r for r in runs if r.contender == "crawlfleet" and r.nodes == 1]
    table = figures(
        "cpu-bound: one node against vanilla Scrapy, run in turn",
        ("repeat", "Scrapy pages/s", "1 node pages/s", "x pages/s", "Scrapy CPU ms/page",
         "1 node CPU ms/page", "x CPU/page"),
    )  # fmt: skip
    speed, cpu = [], []
    for i, (base, node) in enumerate(zip(scrapy, ones, strict=False), 1):
        if not (_measured(base) and _measured(node)):
            continue  # a run that failed: no ratio
        speed.append(node.pages_per_second / base.pages_per_second)
        cpu.append(node.cpu_ms_per_page / base.cpu_ms_per_page)
        table.add_row(
            str(i),
            f"{base.pages_per_second:.0f}",
            f"{node.pages_per_second:.0f}",
            f"{speed[-1]:.2f}",
            f"{base.cpu_ms_per_page:.2f}",
            f"{node.cpu_ms_per_page:.2f}",
            f"{cpu[-1]:.2f}",
        )
    if not speed:
        # runs were made and none paired up whole: a target missed, not one left out
        return {"cpu-bound: 1 node against vanilla Scrapy: no pair measured": False} if ones else {}
    table.add_row("median", "", "", f"{statistics.median(speed):.2f}", "", "",
                  f"{statistics.median(cpu):.2f}")  # fmt: skip
    console.print(table)
    n, fast, lean = len(speed), statistics.median(speed), statistics.median(cpu)
    return {
        f"cpu-bound: 1 node >= 1.0x vanilla Scrapy's pages/s, median of {n} ({fast:.2f})": (
            fast >= 1.0
        ),
        f"cpu-bound: 1 node <= 1.0x vanilla Scrapy's CPU/page, median of {n} ({lean:.2f})": (
            lean <= 1.0
        ),
    }


def _measured(r: CrawlResult) -> bool:
    """The run ended well and has figures to compare (pages/s and CPU a page)."""
    return bool(r.pages_per_second and r.cpu_ms_per_page) and all(
        code == 0 for code in r.exit_codes
    )


def crawl_report(console: Console, results: list[CrawlResult]) -> dict[str, bool]:
    """Print the crawl throughput table; return its targets."""
    table = figures(
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
        vs_scrapy = (
            r.pages_per_second / base.pages_per_second if base and base.pages_per_second else None
        )
        cpu_vs = (
            r.cpu_ms_per_page / base.cpu_ms_per_page
            if base and base.cpu_ms_per_page and r.cpu_ms_per_page
            else None
        )
        vs_one = r.pages_per_second / one.pages_per_second if one and one.pages_per_second else None
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
        if r.contender == "crawlfleet+pipeline" and vs_one is not None:
            cost = 1 - vs_one
            targets[f"item pipeline costs the crawl < 15% (measured {cost:.0%})"] = cost < 0.15
        plain = r.contender == "crawlfleet"
        # (the CPU-bound crawl's comparison is versus_report's, on repeated pairs)
        near = r.scenario not in ("latency-bound", "cpu-bound")
        if plain and r.nodes == 1 and vs_scrapy is not None and near:
            targets[f"{r.scenario}: 1 node >= 0.95x vanilla Scrapy's pages/s"] = vs_scrapy >= 0.95
            if cpu_vs is not None:
                targets[f"{r.scenario}: 1 node <= 1.05x vanilla Scrapy's CPU/page"] = cpu_vs <= 1.05
        if plain and r.nodes == 4 and vs_one is not None and r.scenario == "latency-bound":
            targets["latency-bound: 4 nodes >= 3.5x 1 node"] = vs_one >= 3.5
    if results:
        console.print(table)
    return targets


def polite_report(console: Console, results: list[PoliteResult]) -> dict[str, bool]:
    """The politeness runs: the site's own counts against each limit, and how much of
    the budget each used."""
    table = figures(
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


def balance_report(console: Console, results: list[BalanceResult]) -> dict[str, bool]:
    table = figures(
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


def real_report(console: Console, results: list[RealSiteResult]) -> dict[str, bool]:
    """The real part: vanilla Scrapy, then crawlfleet's nodes, on one real site, in turn
    (*results*: pairs, vanilla first): the same pages, none twice, and the most
    responses in any 1-s window at a rate limit, in every pair; CPU a page against
    vanilla's and the wall time against the bound (pages / limit), medians of the
    pairs."""
    table = figures(
        "real: one real site crawled by vanilla Scrapy, then by crawlfleet's nodes",
        (
            "contender",
            "nodes",
            "limit/s",
            "pages",
            "twice",
            "seconds",
            "x bound",
            "first / last response s",
            "most in 1 s",
            "slots missed",
            "CPU s",
            "CPU ms/page",
        ),
        left=("contender",),
    )
    for r in results:
        table.add_row(
            "vanilla Scrapy" if r.contender == "scrapy" else "crawlfleet",
            str(r.nodes),
            str(r.rate) if r.rate else "none",
            f"{r.pages:,}",
            str(r.fetched_twice),
            f"{r.seconds:.2f}",
            f"{r.seconds / r.bound_seconds:.3f}" if r.bound_seconds else "",
            f"{r.first_seconds:.2f} / {r.last_seconds:.2f}",
            str(r.most_in_second),
            str(r.late) if r.contender == "crawlfleet" else "",
            f"{r.cpu_seconds:.2f}",
            f"{r.cpu_ms_per_page:.2f}",
        )
    console.print(table)
    # runs in turn: vanilla, then the nodes; each pair compared, the targets on medians
    pairs = list(zip(results[::2], results[1::2], strict=False))
    cpu: list[float] = []  # the nodes' CPU a page over vanilla's, pair by pair
    wall: list[float] = []  # the nodes' wall time over the bound
    targets: dict[str, bool] = {}
    for vanilla, r in pairs:
        label = f"real x{r.nodes}" + (f" at {r.rate}/s" if r.rate else "")
        if r.measured and vanilla.measured:
            cpu.append(r.cpu_ms_per_page / vanilla.cpu_ms_per_page)
            if r.bound_seconds:
                wall.append(r.seconds / r.bound_seconds)
        key = f"{label}: the pages vanilla Scrapy fetched, none twice"
        same = r.measured and set(r.urls) == set(vanilla.urls) and r.fetched_twice == 0
        targets[key] = targets.get(key, True) and same
        if r.rate:
            key = f"{label}: never over the limit in any 1 s window (responses)"
            targets[key] = targets.get(key, True) and r.most_in_second <= r.rate
    if not pairs:
        return targets
    label = f"real x{pairs[0][1].nodes}" + (f" at {pairs[0][1].rate}/s" if pairs[0][1].rate else "")
    if len(pairs) > 1:
        console.print(
            f"{label}: CPU a page / vanilla Scrapy's, pair by pair: "
            + ", ".join(f"{x:.2f}" for x in cpu)
            + (" ; wall / bound: " + ", ".join(f"{x:.3f}" for x in wall) if wall else "")
        )
    of = f"median of {len(cpu)}" if len(cpu) > 1 else "one pair"
    # a failed run gives no ratio: with none left the target is missed, not left out
    ratio = statistics.median(cpu) if cpu else math.inf
    measured = f"{ratio:.2f}x, {of}" if cpu else "no pair measured"
    targets[f"{label}: <= {REAL_CPU_RATIO_MAX}x vanilla Scrapy's CPU/page ({measured})"] = (
        ratio <= REAL_CPU_RATIO_MAX
    )
    if pairs[0][1].rate:
        bound = statistics.median(wall) if wall else math.inf
        vanilla_walls = [v.seconds / v.bound_seconds for v, _ in pairs if v.bound_seconds]
        theirs = f"; vanilla {statistics.median(vanilla_walls):.3f}x" if vanilla_walls else ""
        measured = f"{bound:.3f}x{theirs}" if wall else "no pair measured"
        targets[f"{label}: wall <= {REAL_WALL_RATIO_MAX}x the bound pages/limit ({measured})"] = (
            bound <= REAL_WALL_RATIO_MAX
        )
    return targets
