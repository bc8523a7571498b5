"""Opening the state DB and bringing its schema up to date (Alembic is imported when a
migration is looked at, not with this module).

``CRAWLFLEET_STATE_DB_URL`` (the setting, or the environment variable, which wins) is a
SQLAlchemy URL: ``sqlite:///path``, ``postgresql+psycopg://...``,
``mysql+pymysql://...``; empty: the SQLite file ``state.sqlite3`` under
``CRAWLFLEET_DATA_DIR``. Its password never appears in output (``StateDB.shown``).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from crawlfleet.exceptions import ConfigError
from crawlfleet.state.url import ENV_VAR, state_db_url

if TYPE_CHECKING:
    from alembic.config import Config

    from crawlfleet.state.sealing import Sealer

__all__ = ["ENV_VAR", "MIGRATIONS", "StateDB", "state_db_url"]

MIGRATIONS = Path(__file__).with_name("migrations")
VERSION_TABLE = "crawlfleet_alembic_version"
logger = logging.getLogger(__name__)
# Alembic says at INFO which dialect and plugins it uses, at every start: the upgrade
# is said below
logging.getLogger("alembic").setLevel(logging.WARNING)

#: Lock taken while migrating, so that managers starting together migrate once.
_LOCK_NAME = "crawlfleet_state_migrate"
_LOCK_SECONDS = 60


class StateDB:
    """One engine on the state DB, and sessions on it. Build with :meth:`open`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sessions = sessionmaker(engine, expire_on_commit=False)
        #: seals the secrets the DB keeps (crawlfleet.state.sealing): set by the
        #: manager and the commands that read or write them
        self.sealer: Sealer | None = None

    @property
    def secrets(self) -> Sealer:
        """The sealer; ConfigError when this DB was opened without one."""
        if self.sealer is None:
            raise ConfigError(
                "the state DB's secrets need its key (CRAWLFLEET_SECRET_KEY or the key "
                "file): opened without it"
            )
        return self.sealer

    @classmethod
    def open(cls, url: str) -> StateDB:
        """An engine on *url* (its SQLite file's folder created); ConfigError naming
        what is wrong with the URL. Nothing is connected yet."""
        try:
            parsed = make_url(url)
        except ArgumentError:
            raise ConfigError(
                f"{ENV_VAR} is not a database URL: {url!r} (e.g. sqlite:///state.sqlite3 or "
                "postgresql+psycopg://user@host/db)"
            ) from None
        shown = parsed.render_as_string(hide_password=True)
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
            _owner_only(Path(parsed.database))
        try:
            engine = create_engine(parsed, pool_pre_ping=True, future=True)
        except (NoSuchModuleError, ImportError) as exc:
            raise ConfigError(f"{ENV_VAR} {shown}: no driver for it ({exc})") from None
        return cls(engine)

    @property
    def shown(self) -> str:
        """The URL with its password hidden."""
        return self.engine.url.render_as_string(hide_password=True)

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """A session committed at the end of the block (rolled back on an exception)."""
        with self.sessions() as session, session.begin():
            yield session

    def add_new(self, row: object) -> bool:
        """Add *row* in a transaction of its own; False (nothing added) when a unique
        key of its table holds its value already (a name taken, one open at a time)."""
        try:
            with self.session() as s:
                s.add(row)
        except IntegrityError:
            return False
        return True

    def check(self) -> None:
        """One round trip (SELECT 1); the driver's error if the DB does not answer."""
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def revision(self) -> str | None:
        """The schema revision the DB is at (None: never migrated)."""
        with self.engine.connect() as conn:
            return _revision(conn)

    @staticmethod
    def head() -> str:
        """The newest schema revision this crawlfleet ships."""
        from alembic.script import ScriptDirectory

        head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
        assert head is not None
        return head

    def upgrade(self) -> str:
        """Bring the schema to the newest revision (nothing to do when it is there),
        under a lock so that managers starting together migrate once, in one
        transaction (a process killed half-way leaves the schema as it was, on SQLite
        too). MySQL and MariaDB commit each CREATE on its own: there a migration cut
        short is finished by the next upgrade (its steps skip what is already there,
        :mod:`crawlfleet.state.migrations.once`), as are crawlfleet's tables without a
        revision that an older crawlfleet left on SQLite. Returns the revision.
        ConfigError when the DB's revision is one this crawlfleet does not know (a
        newer crawlfleet's)."""
        from alembic import command

        head = self.head()
        engine = self._migration_engine()
        try:
            with engine.connect() as conn, self._migration_lock(conn):
                before = _revision(conn)
                if before != head:
                    if before is not None:
                        self._refuse_unknown(before)
                    config = _alembic_config()
                    config.attributes["connection"] = conn
                    command.upgrade(config, "head")
                    conn.commit()
                    logger.info("state DB %s: schema %s -> %s", self.shown, before or "new", head)
        finally:
            if engine is not self.engine:
                engine.dispose()
        return head

    def _migration_engine(self) -> Engine:
        """The engine migrations run on: this DB's, except on a SQLite file, where
        Python's driver commits each CREATE and ALTER on its own; there a connection of
        its own begins a real transaction, so that a migration is all or nothing."""
        url = self.engine.url
        if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
            return self.engine
        engine = create_engine(url, poolclass=NullPool, future=True)

        @event.listens_for(engine, "connect")
        def _no_implicit_transactions(dbapi_connection: object, _record: object) -> None:
            dbapi_connection.isolation_level = None  # type: ignore[attr-defined]

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN")

        return engine

    def _refuse_unknown(self, revision: str) -> None:
        from alembic.script import ScriptDirectory

        known = {
            r.revision for r in ScriptDirectory.from_config(_alembic_config()).walk_revisions()
        }
        if revision not in known:
            raise ConfigError(
                f"state DB {self.shown} is at schema revision {revision}, which this "
                f"crawlfleet does not know (a newer crawlfleet migrated it): upgrade "
                f"crawlfleet here, or give another {ENV_VAR}"
            )

    @contextlib.contextmanager
    def _migration_lock(self, conn: Connection) -> Iterator[None]:
        backend = self.engine.url.get_backend_name()
        if backend == "postgresql":
            conn.execute(text("SELECT pg_advisory_lock(hashtext(:n))"), {"n": _LOCK_NAME})
            conn.commit()
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(hashtext(:n))"), {"n": _LOCK_NAME})
                conn.commit()
        elif backend in ("mysql", "mariadb"):
            got = conn.execute(
                text("SELECT GET_LOCK(:n, :s)"), {"n": _LOCK_NAME, "s": _LOCK_SECONDS}
            ).scalar()
            if got != 1:
                raise ConfigError(
                    f"state DB {self.shown}: another manager held the migration lock for "
                    f"{_LOCK_SECONDS} s"
                )
            try:
                yield
            finally:
                conn.execute(text("SELECT RELEASE_LOCK(:n)"), {"n": _LOCK_NAME})
        else:  # SQLite: a lock file beside the database (one machine, by nature)
            database = self.engine.url.database
            if not database or database == ":memory:":
                yield
                return
            with open(f"{database}.migrate-lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)

    def close(self) -> None:
        self.engine.dispose()


def _owner_only(path: Path) -> None:
    """Make the SQLite file *path* owner-only (0600) before SQLite opens it, in a folder
    made 0700 when crawlfleet makes it (a folder that exists is left as it is); a file
    that exists readable by others is made 0600, and said so. (SQLite gives its journal
    the database file's mode.)"""
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o700)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        return
    except FileExistsError:
        pass
    except OSError as exc:  # SQLite will say the same, in its own words
        logger.debug("state DB %s: %s", path, exc)
        return
    if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        path.chmod(0o600)
        logger.warning("state DB %s was readable by others: made 0600 (it holds secrets)", path)


def _revision(conn: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def _alembic_config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config
