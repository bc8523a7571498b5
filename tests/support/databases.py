"""Real databases for the tests: the PostgreSQL and MariaDB/MySQL servers to use (or why
their tests skip), a fresh database of each backend, names no other test run uses.

PostgreSQL and MariaDB/MySQL are found at their usual loopback ports (users root, then
postgres), or at CRAWLFLEET_TEST_PG_URL / CRAWLFLEET_TEST_MYSQL_URL. A server that does
not answer makes its tests skip with the reason. MongoDB is used only when
CRAWLFLEET_TEST_MONGODB_URL names one (no server is installed on the usual test machines).
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

__all__ = [
    "BACKENDS",
    "MONGODB_SKIP_REASON",
    "fresh_database_url",
    "mysql_url",
    "postgres_url",
    "require_mongodb",
    "require_server",
    "sql_test_url",
    "unique_table",
    "with_host_port",
]

#: The SQL backends a state DB is tested on.
BACKENDS = ("sqlite", "postgresql", "mysql")

PG_CANDIDATES = (
    "postgresql+psycopg://root@127.0.0.1:5432/test",
    "postgresql+psycopg://postgres@127.0.0.1:5432/test",
)
MYSQL_CANDIDATES = ("mysql+pymysql://root@127.0.0.1:3306/test",)


def _first_reachable(env: str, candidates: tuple[str, ...]) -> tuple[str | None, str]:
    """``(url, "")`` of the first server that answers, else ``(None, reason)``."""
    urls = [os.environ[env]] if os.environ.get(env) else list(candidates)
    errors = []
    for url in urls:
        engine = sa.create_engine(url, connect_args={"connect_timeout": 2}, poolclass=sa.NullPool)
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
            return url, ""
        except Exception as exc:
            lines = str(getattr(exc, "orig", exc)).strip().splitlines()
            shown = make_url(url).render_as_string(hide_password=True)
            errors.append(f"{shown}: {lines[0] if lines else type(exc).__name__}")
        finally:
            engine.dispose()
    return None, "; ".join(errors)


@functools.cache
def postgres_url() -> tuple[str | None, str]:
    """URL of a reachable PostgreSQL, or None and why not."""
    return _first_reachable("CRAWLFLEET_TEST_PG_URL", PG_CANDIDATES)


@functools.cache
def mysql_url() -> tuple[str | None, str]:
    """URL of a reachable MySQL/MariaDB, or None and why not."""
    return _first_reachable("CRAWLFLEET_TEST_MYSQL_URL", MYSQL_CANDIDATES)


def require_server(backend: str) -> str:
    """URL of the *backend* server ("postgresql" or "mysql"); skips the test if it does not
    answer, printing why."""
    url, why = postgres_url() if backend == "postgresql" else mysql_url()
    if url is None:
        label = "PostgreSQL" if backend == "postgresql" else "MySQL/MariaDB"
        pytest.skip(f"{label} not reachable at {why}")
    return url


MONGODB_SKIP_REASON = "CRAWLFLEET_TEST_MONGODB_URL not set: no MongoDB server to test against"


def require_mongodb() -> str:
    """URL of the test MongoDB (CRAWLFLEET_TEST_MONGODB_URL); skips the test without it."""
    url = os.environ.get("CRAWLFLEET_TEST_MONGODB_URL", "").strip()
    if not url:
        pytest.skip(MONGODB_SKIP_REASON)
    return url


def sql_test_url(tmp_path: Path) -> str:
    """PostgreSQL when it answers, else a SQLite file under *tmp_path*."""
    url, _ = postgres_url()
    return url or f"sqlite:///{tmp_path / 'items.sqlite3'}"


def with_host_port(url: str, host: str, port: int) -> str:
    """*url* (redis://, mongodb://) pointing at *host*:*port*, user info and path kept."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{host}:{port}" if userinfo else f"{host}:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


def unique_table(prefix: str = "cft_items") -> str:
    """A table name no other test run uses."""
    return f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


def fresh_database_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """The URL of a new empty database of *backend* (one of :data:`BACKENDS`: a SQLite
    file under *tmp_path*, or a database on the real server, skipping the test when it
    does not answer), dropped when the generator ends."""
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
