"""What every report's table is made with."""

from __future__ import annotations

from rich.table import Table

__all__ = ["figures"]


def figures(title: str, columns: tuple[str, ...], *, left: tuple[str, ...] = ()) -> Table:
    """A table of figures called *title*: its *columns* right-aligned, but those in
    *left* (names, words)."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="left" if col in left else "right")
    return table
