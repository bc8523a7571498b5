"""Where the repository's own files are, for tests that run commands from its root or
read its examples and docs."""

from __future__ import annotations

from pathlib import Path

__all__ = ["EXAMPLES", "ROOT"]

#: The repository's root (where pyproject.toml is).
ROOT = Path(__file__).resolve().parents[2]
#: The example spider specs and projects.
EXAMPLES = ROOT / "examples"
