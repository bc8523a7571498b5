"""Alembic environment of the state DB: run by crawlfleet.state.db.StateDB.upgrade on the
connection it passes (never from alembic.ini: the URL comes from crawlfleet's settings)."""

from __future__ import annotations

from alembic import context

from crawlfleet.state.models import Base

VERSION_TABLE = "crawlfleet_alembic_version"

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    version_table=VERSION_TABLE,
    render_as_batch=True,  # SQLite alters tables by copying them
)
with context.begin_transaction():
    context.run_migrations()
