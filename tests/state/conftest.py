"""A fresh, empty state DB for each test: a SQLite file, or a new database on the real
PostgreSQL and MariaDB servers (dropped afterwards; skipped with the reason printed when
a server does not answer)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from crawlfleet.state.db import StateDB
from tests.pipelines.dbs import require_server

BACKENDS = ("sqlite", "postgresql", "mysql")


def fresh_database_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """The URL of a new empty database of *backend*, dropped when the generator ends."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.sqlite3'}"
        return
    server = make_url(require_server(backend))
    name = f"cft_state_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            if backend == "postgresql":
                conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            else:
                conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))
        admin.dispose()


@pytest.fixture(params=BACKENDS)
def state_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_database_url(request.param, tmp_path)


@pytest.fixture
def state_db(state_url: str) -> Iterator[StateDB]:
    db = StateDB.open(state_url)
    db.upgrade()
    yield db
    db.close()
