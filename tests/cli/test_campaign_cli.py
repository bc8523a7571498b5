"""``crawlfleet campaign``: what an operator types, and the one line each mistake gets
(an unknown campaign, a bad date, a command that does not apply, Redis unreachable for
pause and resume: the campaign then stays as it was)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.cli import UNREACHABLE, one_error_line
from tests.support.paths import ROOT


def campaign(*args: str, db: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawlfleet.cli.main", "campaign", *args, "--db", db],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )


def test_campaign_commands(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'state.sqlite3'}"
    cats = tmp_path / "categories.txt"
    cats.write_text("# one a line\nbooks\nmusic\n\ngames\n")
    made = campaign(
        "create",
        "shop",
        "--job",
        "shop",
        "--url",
        "http://127.0.0.1:9/{date:%Y/%m}/{category}",
        "--from",
        "2026-01-31",
        "--to",
        "2026-06-30",
        "--step",
        "month",
        "--categories",
        f"@{cats}",
        db=db,
        cwd=tmp_path,
    )
    assert made.returncode == 0, made.stderr
    assert "campaign shop: 18 unit(s) for job shop" in made.stdout
    listed = campaign("list", db=db, cwd=tmp_path)
    assert listed.stdout.split("\t")[:2] == ["shop", "running"]
    status = campaign("status", "shop", db=db, cwd=tmp_path)
    assert "cursor at 0" in status.stdout and "progress" in status.stdout

    for args, message in (
        (("status", "nope"), "unknown campaign 'nope'"),
        (("create", "shop", "--job", "shop", "--categories", "a"), "exists already"),
        (
            ("create", "b", "--job", "shop", "--from", "2026-02-30", "--to", "2026-03-01"),
            "from must be a date",
        ),
        (("create", "b", "--job", "shop", "--keywords", "@nofile"), "cannot read nofile"),
        (("extend", "shop", "--to", "2026-05-01"), "before the current end"),
    ):
        line = one_error_line(campaign(*args, db=db, cwd=tmp_path), status=2)
        assert message in line, line
    # pause must reach the job's nodes: with Redis unreachable nothing changes
    line = one_error_line(
        campaign("pause", "shop", "--redis-url", UNREACHABLE, db=db, cwd=tmp_path)
    )
    assert "Redis at redis://:***@127.0.0.1:1/0 unreachable" in line
    assert "\trunning\t" in campaign("list", db=db, cwd=tmp_path).stdout
    stopped = campaign("stop", "shop", db=db, cwd=tmp_path)
    assert stopped.returncode == 0 and "\tstopping\t" in stopped.stdout
    line = one_error_line(campaign("resume", "shop", db=db, cwd=tmp_path), status=2)
    assert "is stopping: cannot resume it" in line  # said before any Redis is touched
    extended = campaign("extend", "shop", "--to", "2026-08-31", db=db, cwd=tmp_path)
    assert "0/24 done" in extended.stdout
