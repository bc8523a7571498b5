"""The field part's reports: polite crawls and a CPU-bound crawl with Redis a network
hop away and beside CPU hogs (:mod:`crawlfleet.benchmark.field`). Each prints its
table, the targets next to the figures, and returns the targets (name -> met)."""

from __future__ import annotations

from rich.console import Console

from crawlfleet.benchmark.field import FieldCpuResult, FieldHost, FieldPoliteResult
from crawlfleet.benchmark.reports.tables import figures

__all__ = ["NEAR_MS", "field_cpu_report", "field_polite_report"]

#: Delays up to this (ms per round trip) are "near": the stricter targets.
NEAR_MS = 5.0
#: Polite: budget used at least this share, near / farther / beside hogs (any delay).
USE_NEAR, USE_FAR, USE_HOGS = 0.95, 0.90, 0.90
#: Polite beside hogs: requests given back at most this share of the pages.
GIVEN_BACK_HOGS = 0.05
#: CPU-bound: pages/s at least this many times the 0-ms run's, near / farther.
SPEED_NEAR, SPEED_FAR = 0.95, 0.80


def _hogs(n: int) -> str:
    return "no hogs" if n == 0 else f"{n} hogs"


def _use_target(r: FieldPoliteResult) -> float:
    if r.hogs:
        return USE_HOGS
    return USE_NEAR if r.delay_ms <= NEAR_MS else USE_FAR


def _speed_target(r: FieldCpuResult) -> float:
    return SPEED_NEAR if r.delay_ms <= NEAR_MS else SPEED_FAR


def _where(r: FieldPoliteResult | FieldCpuResult, h: FieldHost | None = None) -> str:
    return f"{r.delay_ms:g} ms{f', {h.host}' if h else ''}"


def _delays(runs: list[FieldPoliteResult] | list[FieldCpuResult]) -> str:
    found = sorted({r.delay_ms for r in runs})
    return f"{found[0]:g}-{found[-1]:g} ms" if len(found) > 1 else f"{found[0]:g} ms"


def field_polite_report(console: Console, runs: list[FieldPoliteResult]) -> dict[str, bool]:
    """Per run and host: the budget as the site counted it, slots given back, pages
    fetched twice or never; targets per number of hogs."""
    table = figures(
        "field: polite crawls, Redis a delay away, beside CPU hogs (as the site counts them)",
        (
            "delay ms", "hogs", "host", "budget", "requests", "use", "target",
            "most in a window", "over by ms", "site stall ms (there / run)",
            "shortest gap ms", "given back/page (run)", "twice", "never",
        ),
        left=("host", "budget"),
    )  # fmt: skip
    for r in runs:
        for k, h in enumerate(r.hosts):
            table.add_row(
                f"{r.delay_ms:g}" if k == 0 else "",
                str(r.hogs) if k == 0 else "",
                h.host,
                h.budget,
                str(h.requests),
                f"{h.use:.1%}",
                f">= {_use_target(r):.0%}",
                f"{'[red]' if h.over else ''}{h.most_in_window} of <= {h.allowed}"
                f"{'[/]' if h.over else ''} in {h.window_seconds:g} s",
                f"{'[red]' if h.beyond_stall_ms else ''}{h.over_by_ms:.1f}"
                f"{'[/]' if h.beyond_stall_ms else ''}",
                f"{h.stall_in_window_ms:.1f} / {r.site_stall_max_ms:.1f}",
                f"{h.min_gap_ms:.1f}",
                f"{r.late_per_page:.1%} ({r.late})" if k == 0 else "",
                str(h.fetched_twice),
                str(h.never_fetched),
            )
    console.print(table)
    if not runs:
        return {}
    targets: dict[str, bool] = {}
    for hogs in sorted({r.hogs for r in runs}):
        mine = [r for r in runs if r.hogs == hogs]
        label = f"field polite, {_hogs(hogs)}"
        hosts = [(r, h) for r in mine for h in r.hosts]
        over = [h for _r, h in hosts if h.over]
        beyond = [h for _r, h in hosts if h.beyond_stall_ms > 0]
        r, h = max(hosts, key=lambda rh: (rh[1].beyond_stall_ms, rh[1].over_by_ms))
        worst = (
            f"{h.most_in_window} of {h.allowed} in {h.window_seconds:g} s at {_where(r, h)}, "
            f"{h.over_by_ms:.1f} ms too close, site stall {h.stall_in_window_ms:.1f} ms"
        )
        targets[
            f"{label}: never over the budget in any window beyond what the site's own "
            f"stalls explain ({len(over)} host runs over as counted, {len(beyond)} beyond; "
            f"worst: {worst})"
        ] = not beyond
        if hogs:
            groups = [("at every delay", mine, USE_HOGS)]
        else:
            near = [r for r in mine if r.delay_ms <= NEAR_MS]
            far = [r for r in mine if r.delay_ms > NEAR_MS]
            groups = [
                (f"at {_delays(g)}", g, least)
                for g, least in ((near, USE_NEAR), (far, USE_FAR))
                if g
            ]
        for where, group, least in groups:
            r, h = min(((r, h) for r in group for h in r.hosts), key=lambda rh: rh[1].use)
            targets[
                f"{label}: budget used >= {least:.0%} {where} (lowest {h.use:.1%} at "
                f"{_where(r, h)})"
            ] = h.use >= least
        if hogs:
            r = max(mine, key=lambda r: r.late_per_page)
            targets[
                f"{label}: given back <= {GIVEN_BACK_HOGS:.0%} of pages at every delay "
                f"(most {r.late_per_page:.1%} at {_where(r)})"
            ] = r.late_per_page <= GIVEN_BACK_HOGS
    twice = sum(h.fetched_twice for r in runs for h in r.hosts)
    never = sum(h.never_fetched for r in runs for h in r.hosts)
    targets[f"field polite: every page fetched once ({twice} twice, {never} never)"] = (
        twice == never == 0
    )
    return targets


def field_cpu_report(console: Console, runs: list[FieldCpuResult]) -> dict[str, bool]:
    """Per run: pages/s against the 0-ms run beside as many hogs, pages fetched twice
    or never; targets per number of hogs."""
    table = figures(
        "field: CPU-bound crawl, Redis a delay away, beside CPU hogs (as the site counts it)",
        (
            "delay ms", "hogs", "nodes", "pages", "pages/s", "x 0 ms", "target",
            "round trips/page", "twice", "never",
        ),
    )  # fmt: skip
    for r in runs:
        table.add_row(
            f"{r.delay_ms:g}",
            str(r.hogs),
            str(r.nodes),
            str(r.requests),
            f"{r.pages_per_second:.0f}",
            "" if r.ratio is None else f"{r.ratio:.2f}",
            "" if r.delay_ms == 0 else f">= {_speed_target(r):.2f}",
            "" if r.round_trips_per_page is None else f"{r.round_trips_per_page:.3f}",
            str(r.fetched_twice),
            str(r.never_fetched),
        )
    console.print(table)
    if not runs:
        return {}
    targets: dict[str, bool] = {}
    for hogs in sorted({r.hogs for r in runs}):
        mine = [r for r in runs if r.hogs == hogs and r.delay_ms > 0]
        for least, group in (
            (SPEED_NEAR, [r for r in mine if r.delay_ms <= NEAR_MS]),
            (SPEED_FAR, [r for r in mine if r.delay_ms > NEAR_MS]),
        ):
            if not group:
                continue
            r = min(group, key=lambda r: r.ratio or 0.0)
            targets[
                f"field cpu-bound, {_hogs(hogs)}: >= {least:.2f}x the 0-ms run's pages/s at "
                f"{_delays(group)} (lowest {r.ratio or 0.0:.2f}x at {_where(r)})"
            ] = (r.ratio or 0.0) >= least
    twice = sum(r.fetched_twice for r in runs)
    never = sum(r.never_fetched for r in runs)
    targets[
        f"field cpu-bound: no page fetched twice or never, beside hogs too ({twice} twice, "
        f"{never} never)"
    ] = twice == never == 0
    return targets
