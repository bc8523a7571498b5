"""The state DB on SQLite, PostgreSQL and MariaDB: migrations, tokens, the audit."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from crawlfleet.exceptions import ConfigError
from crawlfleet.state.db import VERSION_TABLE, StateDB, state_db_url
from crawlfleet.state.events import list_events, record_event
from crawlfleet.state.models import Base
from crawlfleet.state.tokens import authenticate, create_token, list_tokens, revoke_token


def test_the_migrations_make_exactly_the_models_tables(state_db: StateDB) -> None:
    assert state_db.revision() == StateDB.head()
    with state_db.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        diff = compare_metadata(context, Base.metadata)
    assert diff == []
    state_db.upgrade()  # at the head already: nothing to do, no error
    assert state_db.revision() == StateDB.head()


def test_managers_starting_together_migrate_once(state_url: str) -> None:
    dbs = [StateDB.open(state_url) for _ in range(3)]
    errors: list[BaseException] = []

    def upgrade(db: StateDB) -> None:
        try:
            db.upgrade()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=upgrade, args=(db,)) for db in dbs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert {db.revision() for db in dbs} == {StateDB.head()}
    for db in dbs:
        db.close()


def test_a_token_is_kept_hashed_works_until_revoked_and_names_its_role(state_db: StateDB) -> None:
    token = create_token(state_db, "ci-bot", "operator")
    assert token.startswith("cft_") and len(token) > 40
    with state_db.engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT token_hash FROM crawlfleet_tokens")).scalars().all()
    assert stored and token not in stored[0]
    who = authenticate(state_db, token)
    assert who is not None and (who.name, who.role) == ("ci-bot", "operator")
    assert who.last_used_at is not None
    assert authenticate(state_db, token + "x") is None
    assert authenticate(state_db, "not-a-token") is None
    with pytest.raises(ConfigError, match="already named 'ci-bot'"):
        create_token(state_db, "ci-bot", "viewer")
    revoke_token(state_db, "ci-bot")
    assert authenticate(state_db, token) is None
    assert list_tokens(state_db) == []
    assert [t.name for t in list_tokens(state_db, revoked=True)] == ["ci-bot"]
    again = create_token(state_db, "ci-bot", "viewer")  # the name is free again
    assert authenticate(state_db, again).role == "viewer"  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="no active token named 'nobody'"):
        revoke_token(state_db, "nobody")


@pytest.mark.parametrize(
    ("name", "role", "error"),
    [
        ("bob", "boss", "role must be one of viewer, operator, admin"),
        ("", "viewer", "token name '' is not valid"),
        ("a b", "viewer", "token name 'a b' is not valid"),
        ("x" * 65, "viewer", "is not valid"),
    ],
)
def test_bad_token_requests_name_what_is_wrong(
    tmp_path: Path, name: str, role: str, error: str
) -> None:
    db = StateDB.open(f"sqlite:///{tmp_path / 's.db'}")
    db.upgrade()
    with pytest.raises(ConfigError, match=error):
        create_token(db, name, role)
    assert list_tokens(db, revoked=True) == []


def test_events_newest_first_by_job(state_db: StateDB) -> None:
    record_event(state_db, "alice", "job.control", "news", {"command": "pause"})
    record_event(state_db, "bob", "job.limits.set", "blogs", {"*": "2/1s"})
    record_event(state_db, "alice", "job.control", "news", {"command": "resume"})
    news = list_events(state_db, job="news")
    assert [e["detail"]["command"] for e in news] == ["resume", "pause"]
    assert [e["actor"] for e in list_events(state_db, limit=2)] == ["alice", "bob"]


def test_the_url_comes_from_the_setting_else_sqlite_under_the_data_dir() -> None:
    from scrapy.settings import Settings

    assert state_db_url(Settings({"CRAWLFLEET_DATA_DIR": "/d"})) == "sqlite:////d/state.sqlite3"
    url = "postgresql+psycopg://u:p@h/db"
    assert state_db_url(Settings({"CRAWLFLEET_STATE_DB_URL": url})) == url


def test_a_url_that_is_not_one_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="CRAWLFLEET_STATE_DB_URL is not a database URL"):
        StateDB.open("not a url")
    with pytest.raises(ConfigError, match=r"no driver for it"):
        StateDB.open("nosuchdb+driver://u:secret@h/db")
    try:
        StateDB.open("nosuchdb+driver://u:secret@h/db")
    except ConfigError as exc:
        assert "secret" not in str(exc)


def test_one_open_run_per_job_however_many_managers(state_db: StateDB) -> None:
    from crawlfleet.state.runs import close_run, list_runs, open_run, open_run_start, touch_run

    assert open_run(state_db, "news", nodes=1)
    assert not open_run(state_db, "news", nodes=3)  # a second manager: no second run
    assert open_run(state_db, "blogs", nodes=1)
    touch_run(state_db, "news", nodes=4)
    touch_run(state_db, "news", nodes=2)
    assert open_run_start(state_db, "news") is not None
    assert close_run(state_db, "news", "finished", {"pages": 10})
    assert not close_run(state_db, "news", "finished", {"pages": 99})  # closed once
    assert open_run_start(state_db, "news") is None
    assert open_run(state_db, "news", nodes=1)  # the next run
    news = list_runs(state_db, "news")
    assert [(r["state"], r["nodes_max"]) for r in news] == [("running", 1), ("finished", 4)]
    assert news[1]["figures"] == {"pages": 10}


def test_a_migration_cut_short_is_undone_or_finished_by_the_next_start(state_url: str) -> None:
    # a view named as a table of migration 0005 is in the way: the upgrade fails there,
    # after 0001-0004 made their tables. On SQLite (whose driver commits DDL on its own
    # unless told) and PostgreSQL none of them may stay; MySQL and MariaDB commit each
    # CREATE on its own, and some stay. Either way the next start finishes the schema
    # instead of failing for ever with "table already exists".
    db = StateDB.open(state_url)
    transactional = db.engine.url.get_backend_name() not in ("mysql", "mariadb")
    with db.engine.begin() as conn:
        conn.exec_driver_sql("CREATE VIEW crawlfleet_alert_rules AS SELECT 1 AS x")
    with pytest.raises(sa.exc.SQLAlchemyError):
        db.upgrade()
    with db.engine.connect() as conn:
        left = set(sa.inspect(conn).get_table_names()) - {VERSION_TABLE}
    if transactional:
        assert db.revision() is None and left == set()
    else:
        assert "crawlfleet_timers" in left  # made by 0004, before the failure
    with db.engine.begin() as conn:
        conn.exec_driver_sql("DROP VIEW crawlfleet_alert_rules")
    assert db.upgrade() == StateDB.head() == db.revision()
    with db.engine.connect() as conn:
        tables = set(sa.inspect(conn).get_table_names()) - {VERSION_TABLE}
    assert tables == set(Base.metadata.tables)
    db.close()


def test_tables_without_a_revision_are_brought_up_to_date_keeping_their_rows(
    state_db: StateDB,
) -> None:
    # what a first migration cut short left (an older crawlfleet on SQLite, or MariaDB)
    token = create_token(state_db, "kept", "viewer")
    with state_db.engine.begin() as conn:
        conn.exec_driver_sql(f"DELETE FROM {VERSION_TABLE}")
    assert state_db.upgrade() == StateDB.head() == state_db.revision()
    assert authenticate(state_db, token) is not None


def test_a_revision_this_crawlfleet_does_not_know_is_a_clear_error(state_db: StateDB) -> None:
    with state_db.engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {VERSION_TABLE} SET version_num = '9999'")
    with pytest.raises(ConfigError, match=r"schema revision 9999, which this crawlfleet does"):
        state_db.upgrade()
