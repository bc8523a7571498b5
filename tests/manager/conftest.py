"""The manager in-process (FastAPI's TestClient runs its lifespan) against the real
Redis of the tests and a SQLite state DB, with a token of each role."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from crawlfleet.manager.app import create_app
from crawlfleet.state.db import StateDB
from crawlfleet.state.tokens import create_token
from tests.support.databases import fresh_database_url
from tests.support.manager import ROLES, Manager, manager_settings


@pytest.fixture(params=["sqlite", "postgresql"])
def manager(
    request: pytest.FixtureRequest, redis_server_url: str, key_prefix: str, tmp_path: Path
) -> Iterator[Manager]:
    """The manager on a SQLite state DB, and on a fresh PostgreSQL database where one
    answers (skipped with the reason otherwise)."""
    urls = fresh_database_url(request.param, tmp_path)
    db = StateDB.open(next(urls))
    db.upgrade()
    tokens = {role: create_token(db, f"{role}-1", role) for role in ROLES}
    settings = manager_settings(key_prefix, CRAWLFLEET_MANAGER_WATCH_SECONDS=0.2)
    app = create_app(settings, redis_server_url, db)
    try:
        with TestClient(app, base_url="http://127.0.0.1") as client:
            yield Manager(app, client, db, redis_server_url, key_prefix, tokens)
    finally:
        db.close()
        urls.close()  # drops the PostgreSQL database
