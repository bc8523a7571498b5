"""The benchmark's reports of nothing lost: kill -9 trials and an item store that goes
away. Each prints its part's figures as a table and returns the targets it checks (name
-> met) for the JSON report."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from crawlfleet.benchmark.faults import FaultResult
from crawlfleet.benchmark.outage import OutageResult
from crawlfleet.benchmark.reports.tables import figures

__all__ = ["faults_report", "outage_report"]


def faults_report(console: Console, results: list[FaultResult]) -> dict[str, bool]:
    store = results[0].store
    table = figures(
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
    table = figures(
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
