"""The benchmark's reports of what serves the crawl: the item pipeline, the manager under a
crowd, continuous crawling. Each prints its part's figures as a table and returns the
targets it checks (name -> met) for the JSON report."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from crawlfleet.benchmark.freshness import FreshnessResult
from crawlfleet.benchmark.items import ItemsResult
from crawlfleet.benchmark.manager import ManagerResult
from crawlfleet.benchmark.reports.tables import figures

__all__ = ["freshness_report", "items_report", "manager_report"]


def items_report(console: Console, items: ItemsResult) -> dict[str, bool]:
    """Print the item pipeline tables; return their targets."""
    table = figures(
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
    table = figures(
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


def freshness_report(console: Console, results: list[FreshnessResult]) -> dict[str, bool]:
    """The freshness runs: changes picked up in time, fetches spent on unchanged pages,
    304s, and new versions of pages that changed only in a timestamp."""
    table = figures(
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
            "most in 1 s",
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
            str(r.max_1s),
        )
        targets[
            f"freshness {r.policy}: never over the site's budget in any 1 s window "
            f"(most {r.max_1s} of {r.rate_limit})"
        ] = r.max_1s <= r.rate_limit
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
