"""The error registry's writer tells whoever waits for a record what became of it, once:
written (committed), refused for good by the state DB, or unwritten (the writer stopped
first while the state DB did not answer, was full, or was already closed)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from crawlfleet.state.db import VERSION_TABLE, StateDB
from crawlfleet.state.errors import list_errors
from crawlfleet.state.writer import REFUSED, UNWRITTEN, WRITTEN, Outcome, RegistryWriter
from tests.support.databases import fresh_database_url
from tests.support.failures import failure

#: the state DB does not answer: nothing listens on port 1
DOWN_DB = "postgresql+psycopg://postgres@127.0.0.1:1/crawlfleet"


class Outcomes:
    """A *done* callback that keeps each outcome with its record's number."""

    def __init__(self) -> None:
        self.got: list[tuple[int, Outcome]] = []
        self.event = threading.Event()

    def of(self, n: int) -> Callable[[Outcome], None]:
        def done(outcome: Outcome) -> None:
            self.got.append((n, outcome))
            self.event.set()

        return done

    def wait(self, count: int, seconds: float = 20.0) -> list[tuple[int, Outcome]]:
        while len(self.got) < count:
            assert self.event.wait(seconds), f"only {self.got} settled"
            self.event.clear()
        return self.got


@pytest.fixture
def postgres_url(tmp_path: Path) -> Iterator[str]:
    yield from fresh_database_url("postgresql", tmp_path)


def test_a_record_is_settled_written_once_it_is_committed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.sqlite3'}"
    writer = RegistryWriter(url)
    outcomes = Outcomes()
    writer.failure(failure(1), outcomes.of(1))
    writer.failure(failure(2))  # nobody waits for this one
    assert outcomes.wait(1) == [(1, WRITTEN)]
    db = StateDB.open(url)
    try:  # committed before it was said to be
        assert {e["url"] for e in list_errors(db, "j")} >= {failure(1).url}
    finally:
        db.close()
    writer.close()
    assert writer.written == 2 and outcomes.got == [(1, WRITTEN)]


def test_a_record_the_state_db_refuses_is_settled_refused(postgres_url: str) -> None:
    writer = RegistryWriter(postgres_url)
    outcomes = Outcomes()
    writer.failure(failure(1, reason="x" * 40), outcomes.of(1))
    writer.failure(failure(2), outcomes.of(2))
    assert sorted(outcomes.wait(2)) == [(1, REFUSED), (2, WRITTEN)]
    writer.close()


def test_records_the_writer_cannot_write_are_settled_unwritten() -> None:
    writer = RegistryWriter(DOWN_DB, max_pending=1)
    outcomes = Outcomes()
    writer.failure(failure(1), outcomes.of(1))
    writer.failure(failure(2), outcomes.of(2))
    # the second may find the first still queued (full: dropped at once) or taken by the
    # writer's thread (then it waits with it); neither is settled before the close
    writer.flush()
    assert outcomes.got in ([], [(2, UNWRITTEN)])
    writer.close(timeout=10)
    assert sorted(outcomes.wait(2)) == [(1, UNWRITTEN), (2, UNWRITTEN)]
    writer.failure(failure(3), outcomes.of(3))  # closed: nothing will write it
    assert outcomes.wait(3)[-1] == (3, UNWRITTEN)


def test_a_state_db_that_cannot_be_migrated_refuses_records_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a schema revision this crawlfleet does not know (a newer crawlfleet migrated the
    # DB): the writer says so once and does not wait for ever
    url = f"sqlite:///{tmp_path / 'state.sqlite3'}"
    db = StateDB.open(url)
    db.upgrade()
    with db.engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {VERSION_TABLE} SET version_num = '9999'")
    db.close()
    writer = RegistryWriter(url)
    outcomes = Outcomes()
    writer.failure(failure(1), outcomes.of(1))
    writer.failure(failure(2), outcomes.of(2))
    assert sorted(outcomes.wait(2)) == [(1, REFUSED), (2, REFUSED)]
    writer.close()
    said = [r.getMessage() for r in caplog.records if "does not know" in r.getMessage()]
    assert len(said) == 1 and "\n" not in said[0]
