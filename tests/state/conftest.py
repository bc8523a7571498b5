"""A fresh, empty state DB for each test: a SQLite file, or a new database on the real
PostgreSQL and MariaDB servers (dropped afterwards; skipped with the reason printed when
a server does not answer)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlfleet.state.db import StateDB
from tests.support.databases import BACKENDS, fresh_database_url


@pytest.fixture(params=BACKENDS)
def state_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_database_url(request.param, tmp_path)


@pytest.fixture
def state_db(state_url: str) -> Iterator[StateDB]:
    db = StateDB.open(state_url)
    db.upgrade()
    yield db
    db.close()
