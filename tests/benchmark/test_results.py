"""The benchmark's figures are written as each part ends: a run stopped half-way leaves
what it measured, marked incomplete."""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console

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
