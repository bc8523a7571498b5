"""The benchmark's figures as they are measured: each part's rows and targets are
printed when the part ends and the JSON file is written again at once, so a long run
can be watched (and a run stopped half-way leaves what it measured).

The file is replaced atomically (a temporary file renamed over it); ``"complete":
false`` until the last part is in. A part left out (``--skip``, ``--only``) has no key."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from rich.console import Console

__all__ = ["Results"]


class Results:
    """The report of one ``crawlfleet bench`` run, kept in *path*."""

    def __init__(self, console: Console, path: Path, command: str) -> None:
        self.console = console
        self.path = path
        self.report: dict[str, Any] = {
            "command": command,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "complete": False,
            "targets": {},
            "targets_met": True,
        }
        self.started = time.monotonic()
        self.write()

    @property
    def targets_met(self) -> bool:
        return bool(self.report["targets_met"])

    def add(self, key: str, rows: Any, targets: dict[str, bool]) -> None:
        """Part *key*'s *rows* (``as_dict()`` objects, a list of them, or plain data) and
        its *targets*: printed, and written to the file."""
        self.report[key] = _plain(rows)
        self.report["targets"].update(targets)
        self.report["targets_met"] = all(self.report["targets"].values())
        for name, ok in targets.items():
            self.console.print(f"{'[green]met[/]' if ok else '[red]MISSED[/]'}  {name}")
        self.write()

    def note(self, line: str) -> None:
        """One line of progress, with the time since the start."""
        elapsed = time.monotonic() - self.started
        self.console.print(f"[{elapsed // 60:.0f}m{elapsed % 60:02.0f}s] {line}", markup=False)

    def finish(self) -> None:
        self.report["complete"] = True
        self.report["seconds"] = round(time.monotonic() - self.started, 1)
        self.write()
        self.console.print(f"figures written to {self.path}")

    def write(self) -> None:
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(self.report, indent=2))
        partial.replace(self.path)


def _plain(rows: Any) -> Any:
    if isinstance(rows, list):
        return [_plain(r) for r in rows]
    as_dict = getattr(rows, "as_dict", None)
    return as_dict() if callable(as_dict) else rows
