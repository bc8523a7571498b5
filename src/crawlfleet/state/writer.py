"""A node's writer to the error registry: failures and resolutions go into a bounded
queue on the event loop's thread and are written by a thread of their own, in batches,
so that the crawl never waits for the state DB.

The state DB is opened (and its schema brought up to date) on the first write, not at
start: a crawl with no failure never touches it. When the state DB does not answer,
the writer says so once, keeps what it holds (up to ``max_pending``, then counts what
it drops) and tries again, then says when it is back.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from crawlfleet.state.db import StateDB
from crawlfleet.state.errors import Failure, record_failures, resolve_errors

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
        db: StateDB | None = None
        held: list[tuple[str, Any]] = []
        down_since: float | None = None
        while True:
            stopping = self._stop.is_set()
            held += self._drain()
            if held:
                try:
                    if db is None:
                        db = StateDB.open(self.url)
                        db.upgrade()
                    self._write(db, held)
                    held = []
                    if down_since is not None:
                        logger.info(
                            "Error registry: state DB %s back after %.0f s",
                            db.shown,
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
                    if stopping:
                        break
                    self._stop.wait(RETRY_SECONDS)
                    continue
                except Exception:
                    logger.exception("Error registry: %d record(s) could not be written", len(held))
                    held = []
            if stopping and self._queue.empty():
                break
            self._stop.wait(FLUSH_SECONDS)
        if db is not None:
            db.close()

    def _drain(self) -> list[tuple[str, Any]]:
        out = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    def _write(self, db: StateDB, entries: list[tuple[str, Any]]) -> None:
        # in order: a request resolved, then failing again, ends open
        i = 0
        while i < len(entries):
            kind = entries[i][0]
            j = i
            while j < len(entries) and entries[j][0] == kind:
                j += 1
            chunk = [e[1] for e in entries[i:j]]
            if kind == "failure":
                record_failures(db, chunk)
            else:
                by_job: dict[str, list[int]] = {}
                for job, eid in chunk:
                    by_job.setdefault(job, []).append(eid)
                for job, ids in by_job.items():
                    resolve_errors(db, job, ids)
            self.written += j - i
            i = j
