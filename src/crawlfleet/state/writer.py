"""A node's writer to the error registry: failures and resolutions go into a bounded
queue on the event loop's thread and are written by a thread of their own, in batches,
so that the crawl never waits for the state DB.

The state DB is opened (and its schema brought up to date) on the first write, not at
start: a crawl with no failure never touches it (nor imports SQLAlchemy). Records are
written one at a time, in order (a request resolved, then failing again, ends open).
When the state DB does not answer, the writer says so once, keeps what it holds (up to
``max_pending``, then counts what it drops), tries again, and says when it is back; a
record the state DB refuses (too large, say) is dropped with a warning, not retried. At
stop it writes what it can and says how many records it could not.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

from crawlfleet.state.records import Failure

__all__ = ["RegistryWriter"]

logger = logging.getLogger(__name__)

#: Seconds between two batches, and between two tries while the state DB is down.
FLUSH_SECONDS = 1.0
RETRY_SECONDS = 5.0


class RegistryWriter:
    """Writes :class:`Failure` records and resolved error ids to the state DB at *url*."""

    def __init__(self, url: str, *, max_pending: int = 10_000) -> None:
        self.url = url
        self.max_pending = max_pending
        self.dropped = 0
        self.written = 0
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def failure(self, failure: Failure) -> None:
        self._put(("failure", failure))

    def resolved(self, job: str, error_id: int) -> None:
        self._put(("resolved", (job, error_id)))

    def unit_finished(self, unit_id: int, *, ok: bool, error: str | None = None) -> None:
        """A campaign unit's first request was crawled (*ok*) or failed for good."""
        self._put(("unit", (unit_id, ok, error)))

    def _put(self, entry: tuple[str, Any]) -> None:
        if self._queue.qsize() >= self.max_pending:
            self.dropped += 1
            return
        self._queue.put(entry)
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="crawlfleet-errors", daemon=True
                )
                self._thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Write what is pending (waiting at most *timeout* seconds), then stop."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                logger.warning(
                    "Error registry: %d record(s) not written at close (state DB too slow)",
                    self._queue.qsize(),
                )
        if self.dropped:
            logger.warning(
                "Error registry: %d record(s) dropped (more than %d waiting)",
                self.dropped,
                self.max_pending,
            )

    # -- the writer thread ---------------------------------------------------------
    def _run(self) -> None:
        # SQLAlchemy and the state DB are imported here, in the writer's thread, on the
        # first record: a node that never fails a request never loads them
        from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError

        from crawlfleet.state.db import StateDB

        db: StateDB | None = None
        held: list[tuple[str, Any]] = []
        down_since: float | None = None
        while True:
            stopping = self._stop.is_set()
            held += self._drain()
            try:
                if held and db is None:
                    opened = StateDB.open(self.url)
                    try:
                        opened.upgrade()
                    except BaseException:
                        opened.close()
                        raise
                    db = opened
                while held and db is not None:
                    try:
                        self._write(db, held[0])
                    except (OperationalError, InterfaceError):
                        raise  # the state DB does not answer: keep it, try again
                    except SQLAlchemyError as exc:  # this record cannot be stored
                        logger.warning(
                            "Error registry: a record of %s could not be stored (%s): dropped",
                            _url_of(held[0]),
                            type(exc).__name__,
                        )
                    held.pop(0)
                    self.written += 1
                if down_since is not None and not held:
                    logger.info(
                        "Error registry: state DB back after %.0f s",
                        time.monotonic() - down_since,
                    )
                    down_since = None
            except SQLAlchemyError as exc:
                if down_since is None:
                    down_since = time.monotonic()
                    logger.warning(
                        "Error registry: the state DB does not answer (%s); %d record(s) wait",
                        type(exc).__name__,
                        len(held),
                    )
                if not stopping:
                    self._stop.wait(RETRY_SECONDS)
                    continue
            except Exception:
                logger.exception("Error registry: %d record(s) could not be written", len(held))
                held = []
            if stopping and self._queue.empty():
                break
            self._stop.wait(FLUSH_SECONDS)
        if held:
            logger.warning(
                "Error registry: %d record(s) not written: the state DB did not answer "
                "before the node stopped",
                len(held),
            )
        if db is not None:
            db.close()

    def _drain(self) -> list[tuple[str, Any]]:
        out = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    @staticmethod
    def _write(db: Any, entry: tuple[str, Any]) -> None:
        from crawlfleet.state.errors import record_failures, resolve_errors

        kind, value = entry
        if kind == "failure":
            record_failures(db, [value])
        elif kind == "unit":
            from crawlfleet.state.campaigns import finish_unit

            unit_id, ok, error = value
            finish_unit(db, unit_id, ok=ok, error=error)
        else:
            job, eid = value
            resolve_errors(db, job, [eid])


def _url_of(entry: tuple[str, Any]) -> str:
    kind, value = entry
    if kind == "unit":
        return f"campaign unit {value[0]}"
    return str(value.url) if kind == "failure" else f"error {value[1]}"
