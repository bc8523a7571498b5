"""Schema steps that may already be done: what a migration creates, created unless it is
there.

On PostgreSQL and SQLite a migration is one transaction (see
:meth:`crawlfleet.state.db.StateDB.upgrade`): cut short, it leaves nothing. MySQL and
MariaDB commit each CREATE on its own, so a migration cut short there (a kill -9, a lost
connection) leaves some of its tables and indexes without its revision; the next upgrade
runs it again, and these steps skip what the first try made instead of failing with
"table already exists". A table is created whole or not at all, so one that is there is
the one the migration made.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

__all__ = ["create_index", "create_table"]


def _inspector() -> sa.Inspector:
    return sa.inspect(op.get_bind())


def create_table(name: str, *columns: Any, **options: Any) -> None:
    """``op.create_table``, unless table *name* exists (a view of that name is not
    one: creating the table fails then)."""
    if name not in _inspector().get_table_names():
        op.create_table(name, *columns, **options)


def create_index(name: str, table: str, columns: list[str], **options: Any) -> None:
    """``op.create_index``, unless *table* has an index *name*."""
    if name not in {index["name"] for index in _inspector().get_indexes(table)}:
        op.create_index(name, table, columns, **options)
