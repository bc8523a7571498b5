"""The benchmark's figures are written as each part ends: a run stopped half-way leaves
what it measured, marked incomplete."""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console

from crawlfleet.benchmark.crawl import CrawlResult
from crawlfleet.benchmark.reports import versus_report
from crawlfleet.benchmark.results import Results


@dataclass
class Row:
    pages: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def test_each_part_is_written_when_it_ends_and_the_end_marks_it_complete(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    shown = io.StringIO()
    out = Results(Console(file=shown, width=120), path, "crawlfleet bench --quick")
    assert json.loads(path.read_text())["complete"] is False
    out.add("crawl", [Row(10), Row(20)], {"crawl: exact": True})
    on_disk = json.loads(path.read_text())
    assert on_disk["crawl"] == [{"pages": 10}, {"pages": 20}] and on_disk["complete"] is False
    assert on_disk["targets_met"] is True and "met  crawl: exact" in shown.getvalue()
    out.add("polite", [Row(5)], {"polite: budget use >= 95%": False})
    out.note("[not markup] a line")
    assert "[not markup] a line" in shown.getvalue() and "MISSED  polite" in shown.getvalue()
    out.finish()
    final = json.loads(path.read_text())
    assert final["complete"] is True and final["targets_met"] is False and out.targets_met is False
    assert sorted(final) == sorted(
        ["command", "time", "complete", "targets", "targets_met", "crawl", "polite", "seconds"]
    )
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]  # no temporary file left


def crawl(contender: str, nodes: int, pages_per_second: float, cpu_ms: float) -> CrawlResult:
    return CrawlResult(
        "cpu-bound", contender, nodes, pages_per_second, 3000, 10.0, 0, 0, cpu_ms_per_page=cpu_ms
    )


def test_one_node_against_scrapy_is_judged_on_the_median_of_the_pairs_ratios() -> None:
    """Each repeat pairs a Scrapy run with a node run (in turn); the targets read the
    median of the pairs' ratios, so one noisy pair does not decide, and the other
    contenders' runs in the list are left out."""
    shown = io.StringIO()
    runs = [
        crawl("scrapy", 1, 100, 2.0), crawl("crawlfleet", 1, 104, 1.9),
        crawl("crawlfleet", 4, 300, 2.4),
        crawl("scrapy", 1, 100, 2.0), crawl("crawlfleet", 1, 60, 3.0),  # a noisy pair
        crawl("scrapy", 1, 50, 4.0), crawl("crawlfleet", 1, 51, 3.9),
    ]  # fmt: skip
    targets = versus_report(Console(file=shown, width=200), runs)
    assert targets == {
        "cpu-bound: 1 node >= 1.0x vanilla Scrapy's pages/s, median of 3 (1.02)": True,
        "cpu-bound: 1 node <= 1.0x vanilla Scrapy's CPU/page, median of 3 (0.97)": True,
    }
    assert "median" in shown.getvalue()
    slower = versus_report(Console(file=io.StringIO()), runs[:2] + runs[3:5])
    assert list(slower.values()) == [False, False]  # medians 0.82x pages/s, 1.225x CPU
    assert versus_report(Console(file=io.StringIO()), [crawl("scrapy", 1, 100, 2.0)]) == {}
    # a node run that failed (no CPU counted, exit code None) is no pair: it cannot pull
    # the median down, and with no pair left the target is missed, not left out
    failed = crawl("crawlfleet", 1, 90, 0.0)
    failed.exit_codes = [None]
    lost = versus_report(Console(file=io.StringIO()), [crawl("scrapy", 1, 100, 2.0), failed])
    assert lost == {"cpu-bound: 1 node against vanilla Scrapy: no pair measured": False}
    kept = versus_report(
        Console(file=io.StringIO()), [*runs[:2], crawl("scrapy", 1, 100, 2.0), failed]
    )
    assert list(kept) == [
        "cpu-bound: 1 node >= 1.0x vanilla Scrapy's pages/s, median of 1 (1.04)",
        "cpu-bound: 1 node <= 1.0x vanilla Scrapy's CPU/page, median of 1 (0.95)",
    ]
