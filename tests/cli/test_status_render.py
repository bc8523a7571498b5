"""``crawlfleet status`` as a terminal shows it: at 80 and 120 columns no line is wider
than the terminal, every header is whole, and the ETA says something only when there is
work to finish."""

from __future__ import annotations

import pytest
from rich.console import Console

from crawlfleet.cli.status import COLUMNS, DROPPED_FIRST, render
from crawlfleet.fleet.snapshot import JobSnapshot


def node(state: str = "waiting for the item store") -> dict[str, object]:
    return {
        "alive": True,
        "expires_in_s": 25.0,
        "state": state,
        "pages_per_min": 1234.5,
        "items_per_min": 1100.0,
        "pages": 123456,
        "items": 120000,
        "errors": {"spider_exceptions": 3, "download_errors": 12, "log_errors": 15},
        "latency_ms": 250.5,
        "in_flight": 16,
        "concurrency": 32,
        "cpu_percent": 87.5,
        "rss_bytes": 512 * 2**20,
        "loop_lag_max_ms": 12.5,
    }


def snap(queued: int = 5000, nodes: int = 3) -> JobSnapshot:
    return JobSnapshot(
        job="books",
        now_ms=0,
        queued=queued,
        leased=40 if queued else 0,
        overdue_leases=0,
        oldest_deadline_ms=None,
        sites=2,
        top_sites=[("books.example", queued), ("a-much-longer-site-name.example.org", 3)],
        sites_scanned=2,
        malformed=0,
        nodes={f"crawler-{i:02d}.eu-west.internal-a1b2c3": node() for i in range(nodes)},
    )


def shown(snaps: list[JobSnapshot], width: int) -> list[str]:
    console = Console(width=width, record=True, color_system=None, force_terminal=False)
    console.print(render(snaps, width))
    return console.export_text().splitlines()


@pytest.mark.parametrize("width", [80, 120, 200])
def test_status_fits_the_terminal_with_whole_headers(width: int) -> None:
    lines = shown([snap()], width)
    assert max(len(line) for line in lines) <= width, "\n".join(lines)
    text = "\n".join(lines)
    headers = [h for h, _ in COLUMNS if all(part in text for part in h.split("\n"))]
    assert {"node", "state", "pages"} <= set(headers)
    # a header is whole: each of its lines appears as it is, on one row
    for header in headers:
        for part in header.split("\n"):
            assert any(part in line for line in lines), part
    assert "crawler-00.eu-west.internal-a1b2c3" in text  # node ids whole
    if width >= 200:
        assert len(headers) == len(COLUMNS), headers
    dropped = [h for h, _ in COLUMNS if h not in headers]
    # the least telling columns go first
    assert set(dropped) == set(DROPPED_FIRST[: len(dropped)])


def test_the_eta_means_something_or_says_why_not() -> None:
    idle = "\n".join(shown([snap(queued=0, nodes=0)], 120))
    assert "ETA" in idle and "- (nothing queued or leased)" in idle and "0m00s" not in idle


def test_the_phase_of_the_nodes_is_shown_once_newest_first() -> None:
    s = snap(nodes=3)
    lines = [
        "Re-crawl round 1/3: 3 of 9 failure(s) re-fetched, 2 fixed, 1 failed again",
        "Re-crawl round 1/3: 5 of 9 failure(s) re-fetched, 4 fixed, 1 failed again",
    ]
    for i, info in enumerate(s.nodes.values()):
        info.update(phase=lines[min(i, 1)], updated=1000.0 + i)
    assert s.phases == [lines[1], lines[0]]
    text = "\n".join(shown([s], 200))
    assert text.count("Re-crawl round 1/3") == 2 and "phase" in text
    assert max(len(line) for line in shown([s], 80)) <= 80
    dead = snap(nodes=1)
    for info in dead.nodes.values():
        info.update(alive=False, phase=lines[0])
    assert dead.phases == [] and "phase" not in "\n".join(shown([dead], 200))
