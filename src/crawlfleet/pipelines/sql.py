"""SQL item store: SQLite, PostgreSQL and MySQL/MariaDB through SQLAlchemy 2.

One table (``CRAWLFLEET_SQL_TABLE``, created when missing) with the columns

============  ==============================================================
key           primary key: the item key (``_key``, see ``pipelines/key.py``)
job           the job that last wrote the item
item_type     the item's type (``_type``, class name, or ``item``)
url           the page the item came from (``url`` field), may be NULL
document      the item's public fields as JSON (JSONB on PostgreSQL)
created_at    when the key was first written (UTC)
updated_at    when it was last written (UTC)
============  ==============================================================

Writes are upserts by key (``INSERT ... ON CONFLICT (key) DO UPDATE`` on SQLite and
PostgreSQL, ``INSERT ... ON DUPLICATE KEY UPDATE`` on MySQL/MariaDB), in batches of up
to ``CRAWLFLEET_STORE_BATCH_ITEMS`` per transaction, on the store's worker thread; see
:mod:`crawlfleet.pipelines.buffered` for buffering, retries and back-pressure. The marks
of a batch (:class:`~crawlfleet.pipelines.sinks.ItemMark`) follow its upserts in the
same transaction, as one ``UPDATE`` sent for all of them: ``gone_at`` set in the stored
document by the database's own JSON function (``json_set`` on SQLite, ``JSON_SET`` on
MySQL/MariaDB, ``||`` on PostgreSQL's JSONB), ``updated_at`` renewed, nothing else
touched; a key that is not stored matches no row.

``CRAWLFLEET_SQL_URL`` selects the database, e.g. ``sqlite:///items.db``,
``postgresql+psycopg://user@host:5432/db``, ``mysql+pymysql://user@host:3306/db``;
empty: ``items.sqlite3`` under ``CRAWLFLEET_DATA_DIR``. SQLite files use WAL mode.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from scrapy.crawler import Crawler
from scrapy.statscollectors import StatsCollector
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import URL, Engine, make_url

from crawlfleet.exceptions import ConfigError
from crawlfleet.pipelines.buffered import BufferedSink, StoreOptions
from crawlfleet.pipelines.key import MAX_KEY_LENGTH
from crawlfleet.pipelines.sinks import GONE_AT, ItemMark, StoredItem
from crawlfleet.pipelines.store import StorePipeline
from crawlfleet.pipelines.versions import continued, is_stamped
from crawlfleet.revisit.config import revisit_mode, revisit_policy
from crawlfleet.settings.access import get_path, get_str
from crawlfleet.state.url import state_db_identity

__all__ = [
    "SUPPORTED_DIALECTS",
    "SqlSink",
    "SqlStorePipeline",
    "check_dialect",
    "default_sql_url",
    "items_table",
    "row_document",
]

#: Database backends the SQL store supports (SQLAlchemy dialect names).
SUPPORTED_DIALECTS = ("sqlite", "postgresql", "mysql", "mariadb")


def check_dialect(url: URL) -> str:
    """The database of *url* (its backend's name); ConfigError naming
    CRAWLFLEET_SQL_URL unless it is one of :data:`SUPPORTED_DIALECTS`."""
    backend = url.get_backend_name()
    if backend not in SUPPORTED_DIALECTS:
        raise ConfigError(
            f"CRAWLFLEET_SQL_URL: database {backend!r} is not supported "
            f"(use one of {', '.join(SUPPORTED_DIALECTS)})"
        )
    return backend


_TABLE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_UPDATED = ("job", "item_type", "url", "document", "updated_at")
#: keys read in one query when a batch's versions are continued
_READ_KEYS = 500


def row_document(row: Any) -> Any:
    """The ``document`` of a row of the items table, decoded (MariaDB returns JSON
    columns as text)."""
    document = row["document"]
    return json.loads(document) if isinstance(document, str) else document


def _json_dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def items_table(name: str, metadata: sa.MetaData | None = None) -> sa.Table:
    """The items table called *name* (see the module docstring)."""
    if not _TABLE_RE.match(name):
        raise ConfigError(
            f"CRAWLFLEET_SQL_TABLE must be a letter or _ then letters, digits or _ "
            f"(at most 63), got {name!r}"
        )
    return sa.Table(
        name,
        metadata or sa.MetaData(),
        sa.Column("key", sa.String(MAX_KEY_LENGTH), primary_key=True),
        sa.Column("job", sa.String(255), nullable=False),
        sa.Column("item_type", sa.String(255), nullable=False),
        sa.Column("url", sa.Text, nullable=True),
        sa.Column(
            "document", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False
        ),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=False),
        sa.Index(f"ix_{name}_job_updated", "job", "updated_at"),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )


def default_sql_url(data_dir: Path) -> str:
    """The URL of the default SQLite store under *data_dir*."""
    return f"sqlite:///{(data_dir / 'items.sqlite3').as_posix()}"


def _connect_args(url: URL) -> dict[str, Any]:
    backend = url.get_backend_name()
    if backend == "sqlite":
        return {"timeout": 5.0}
    if backend == "postgresql":
        # Keepalives: a server that vanishes mid-query is noticed in ~25 s, not minutes.
        return {
            "connect_timeout": 5,
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
            "application_name": "crawlfleet",
        }
    return {"connect_timeout": 5, "read_timeout": 60, "write_timeout": 60, "charset": "utf8mb4"}


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class SqlSink(BufferedSink):
    """Item sink writing to one SQL table (see the module docstring).

    *engine_options* are extra ``sqlalchemy.create_engine`` arguments; its
    ``connect_args`` are merged over the defaults (timeouts, keepalives, utf8mb4).
    *versions*: continue the versions of the pages of a continuous crawl (on when
    ``CRAWLFLEET_REVISIT`` is), *unversioned* the item fields that make no new version
    (``CRAWLFLEET_REVISIT_IGNORE_FIELDS``): :mod:`crawlfleet.pipelines.versions`.
    """

    name = "sql"

    def __init__(
        self,
        url: str,
        *,
        table: str = "crawlfleet_items",
        options: StoreOptions | None = None,
        stats: StatsCollector | None = None,
        engine_options: Mapping[str, Any] | None = None,
        versions: bool = False,
        unversioned: Collection[str] = (),
    ) -> None:
        super().__init__(options, stats=stats)
        self.versions = versions
        self.unversioned = frozenset(unversioned)
        try:
            self.url = make_url(url)
        except sa_exc.ArgumentError as exc:
            raise ConfigError(
                f"CRAWLFLEET_SQL_URL is not a database URL: {url!r} ({exc})"
            ) from None
        backend = check_dialect(self.url)
        self.table = items_table(table)
        options_ = dict(engine_options or {})
        connect_args = {**_connect_args(self.url), **options_.pop("connect_args", {})}
        try:
            self.engine: Engine = sa.create_engine(
                self.url,
                pool_pre_ping=True,
                json_serializer=_json_dumps,
                connect_args=connect_args,
                **options_,
            )
        except (ImportError, sa_exc.NoSuchModuleError, sa_exc.ArgumentError) as exc:
            raise ConfigError(f"CRAWLFLEET_SQL_URL {self.safe_url}: {exc}") from None
        if backend == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        digest = hashlib.sha1(
            f"{self.url.render_as_string(hide_password=True)}|{table}".encode(),
            usedforsecurity=False,
        ).hexdigest()[:12]
        self._spill_id = f"sql-{backend}-{table}-{digest}"
        self._statement = self._upsert_statement()
        self._mark_statement = self._mark_gone_statement()

    @property
    def safe_url(self) -> str:
        """The database URL without its password (for logs)."""
        return self.url.render_as_string(hide_password=True)

    @property
    def target(self) -> str:
        """``sql <url without password> table <name>``."""
        return f"sql {self.safe_url} table {self.table.name}"

    def identity(self) -> dict[str, str]:
        """The database (as :func:`~crawlfleet.state.url.state_db_identity` says it,
        never a password) and table of the store."""
        where = state_db_identity(self.url.render_as_string(hide_password=True))
        return {"store": "sql", "database": where, "table": self.table.name}

    @property
    def spill_id(self) -> str:
        """Spill-file id: backend, table and a hash of URL and table."""
        return self._spill_id

    # --- worker-thread operations ----------------------------------------------------

    def setup(self) -> None:
        """Create the SQLite directory and the table when missing."""
        database = self.url.database
        if self.url.get_backend_name() == "sqlite" and database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        self.table.metadata.create_all(self.engine, checkfirst=True)

    def _upsert_statement(self) -> sa.Executable:
        """The upsert of one row with named parameters; executed with many rows, the
        drivers send whole batches (multi-row VALUES, pipelining)."""
        dialect = self.engine.dialect.name
        values = {c.name: sa.bindparam(c.name, type_=c.type) for c in self.table.columns}
        if dialect in ("mysql", "mariadb"):
            my_stmt = mysql.insert(self.table).values(values)
            return my_stmt.on_duplicate_key_update({c: my_stmt.inserted[c] for c in _UPDATED})
        insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        stmt = insert(self.table).values(values)
        return stmt.on_conflict_do_update(
            index_elements=[self.table.c.key], set_={c: stmt.excluded[c] for c in _UPDATED}
        )

    def _mark_gone_statement(self) -> sa.Executable:
        """The update setting ``gone_at`` (parameter ``gone_at``) in the document of
        the row with key ``mark_key``, and its ``updated_at`` (``now``), in the
        dialect's own JSON function; executed with many marks at once."""
        t = self.table
        when = sa.bindparam("gone_at", type_=sa.Text)
        document: sa.ColumnElement[Any]
        if self.engine.dialect.name == "postgresql":
            # typed: jsonb_build_object takes "any", so an untyped parameter is refused
            pair = sa.func.jsonb_build_object(
                sa.cast(sa.literal(GONE_AT), sa.Text), sa.cast(when, sa.Text)
            )
            document = t.c.document.op("||")(pair)
        else:  # SQLite's json_set, MySQL's and MariaDB's JSON_SET
            document = sa.func.json_set(t.c.document, f"$.{GONE_AT}", when)
        return (
            sa.update(t)
            .where(t.c.key == sa.bindparam("mark_key"))
            .values(document=document, updated_at=sa.bindparam("now", type_=t.c.updated_at.type))
        )

    def write_batch(self, records: Sequence[StoredItem], marks: Sequence[ItemMark] = ()) -> None:
        """Upsert *records*, then apply *marks*, in one transaction."""
        now = _utcnow()
        rows = [
            {
                "key": r.key,
                "job": r.job,
                "item_type": r.item_type,
                "url": r.url,
                "document": r.document,
                "created_at": now,
                "updated_at": now,
            }
            for r in records
        ]
        with self.engine.begin() as conn:
            if rows:
                self._continue_versions(conn, rows)
                conn.execute(self._statement, rows)
            if marks:
                conn.execute(
                    self._mark_statement,
                    [{"mark_key": m.key, "gone_at": m.gone_at, "now": now} for m in marks],
                )

    def _continue_versions(self, conn: sa.Connection, rows: list[dict[str, Any]]) -> None:
        """The documents of *rows* that carry a page's ``version`` continue the history
        of the items stored under their keys (:func:`~crawlfleet.pipelines.versions.
        continued`: a lost frontier starts no page over), read in the same transaction."""
        stamped = [r for r in rows if self.versions and is_stamped(r["document"])]
        if not stamped:
            return
        t = self.table
        stored: dict[str, Any] = {}
        for i in range(0, len(stamped), _READ_KEYS):
            keys = [r["key"] for r in stamped[i : i + _READ_KEYS]]
            found = conn.execute(sa.select(t.c.key, t.c.document).where(t.c.key.in_(keys)))
            stored.update((row.key, row_document(row._mapping)) for row in found)
        for row in stamped:
            held = stored.get(row["key"])
            if isinstance(held, dict):
                row["document"] = continued(row["document"], held, self.unversioned)

    def is_transient(self, exc: BaseException) -> bool:
        """Connection trouble, timeouts and locks are transient; data errors are not."""
        if isinstance(exc, sa_exc.DBAPIError):
            return exc.connection_invalidated or isinstance(
                exc, sa_exc.OperationalError | sa_exc.InterfaceError
            )
        return isinstance(exc, sa_exc.DisconnectionError | sa_exc.TimeoutError | OSError)

    def teardown(self) -> None:
        """Close the connection pool."""
        self.engine.dispose()

    # --- reads -----------------------------------------------------------------------

    def get(self, key: str) -> StoredItem | None:
        """The stored record with *key*, or None."""
        t = self.table
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(t).where(t.c.key == key)).mappings().first()
        if row is None:
            return None
        return StoredItem(
            key=row["key"],
            job=row["job"],
            item_type=row["item_type"],
            url=row["url"],
            document=row_document(row),
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )

    def count(self) -> int:
        """Rows in the table."""
        with self.engine.connect() as conn:
            return int(
                conn.execute(sa.select(sa.func.count()).select_from(self.table)).scalar_one()
            )

    def drop_table(self) -> None:
        """Drop the table (tests and ``job reset`` tooling). Blocking."""
        self.table.drop(self.engine, checkfirst=True)


class SqlStorePipeline(StorePipeline):
    """Item pipeline storing into the SQL store configured by CRAWLFLEET_SQL_URL and
    CRAWLFLEET_SQL_TABLE (see :class:`~crawlfleet.pipelines.store.StorePipeline`)."""

    @classmethod
    def sink_from_crawler(cls, crawler: Crawler) -> SqlSink:
        """Build the SQL sink from settings; a wrong URL or table stops start-up."""
        settings = crawler.settings
        url = get_str(settings, "CRAWLFLEET_SQL_URL").strip()
        if not url:
            url = default_sql_url(get_path(settings, "CRAWLFLEET_DATA_DIR"))
        sink = SqlSink(
            url,
            table=get_str(settings, "CRAWLFLEET_SQL_TABLE"),
            options=StoreOptions.from_settings(settings),
            stats=crawler.stats,
            versions=revisit_mode(settings) != "off",
            unversioned=revisit_policy(settings).ignore_fields,
        )
        return sink
