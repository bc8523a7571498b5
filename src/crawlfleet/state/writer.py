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

A caller that must know when a record is durable passes a *done* callback with it
(:meth:`RegistryWriter.failure`): the node keeps a request whose final failure is being
recorded leased until then (see :mod:`crawlfleet.node.ledger`). *done* is called exactly
once, from the writer's thread (or the caller's, when the record is not even queued),
with what became of the record:

- :data:`WRITTEN`: committed in the state DB;
- :data:`REFUSED`: the state DB refused this record (an error other than not answering,
  or an unexpected one), or cannot be brought up to date (its schema is broken: said
  once, in one line); dropped with a warning naming it: writing it again would fail
  again;
- :data:`UNWRITTEN`: not written, and it will not be: the writer stopped first (the
  state DB did not answer by then), or more than ``max_pending`` records waited.

While the state DB does not answer, *done* waits: the writer keeps the record and tries
again. A callback must be quick and must not raise (it is called on the writer's
thread); one that raises is logged and ignored.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Literal

from crawlfleet.exceptions import ConfigError
from crawlfleet.outage import Outage
from crawlfleet.state.records import Failure

__all__ = ["REFUSED", "UNWRITTEN", "WRITTEN", "Outcome", "RegistryWriter"]

logger = logging.getLogger(__name__)

#: Seconds between two batches, and between two tries while the state DB is down.
FLUSH_SECONDS = 1.0
RETRY_SECONDS = 5.0

#: What became of a record (see the module docstring).
Outcome = Literal["written", "refused", "unwritten"]
WRITTEN: Outcome = "written"
REFUSED: Outcome = "refused"
UNWRITTEN: Outcome = "unwritten"

#: One record to write: its kind, its value, and who waits for it (None: nobody).
_Entry = tuple[str, Any, Callable[[Outcome], None] | None]


class RegistryWriter:
    """Writes :class:`Failure` records and resolved error ids to the state DB at *url*."""

    def __init__(self, url: str, *, max_pending: int = 10_000) -> None:
        self.url = url
        self.max_pending = max_pending
        self.dropped = 0
        self.written = 0
        self._queue: queue.Queue[_Entry] = queue.Queue()
        self._stop = threading.Event()
        #: set to cut the writer's wait short (close, flush)
        self._nudge = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def failure(self, failure: Failure, done: Callable[[Outcome], None] | None = None) -> None:
        """Write *failure*; *done*, if given, is called once with its :data:`Outcome`
        (see the module docstring): only then is it durable, or known never to be."""
        self._put(("failure", failure, done))

    def resolved(self, job: str, error_id: int) -> None:
        self._put(("resolved", (job, error_id), None))

    def unit_finished(self, unit_id: int, *, ok: bool, error: str | None = None) -> None:
        """A campaign unit's first request was crawled (*ok*) or failed for good."""
        self._put(("unit", (unit_id, ok, error), None))

    def flush(self) -> None:
        """Write what waits now (or try the state DB again now, while it does not
        answer) instead of at the next batch's time. Returns at once."""
        self._nudge.set()

    def _put(self, entry: _Entry) -> None:
        if self._queue.qsize() >= self.max_pending:
            self.dropped += 1
            _settle(entry, UNWRITTEN)
            return
        thread = self._thread
        if self._stop.is_set() and thread is not None and not thread.is_alive():
            _settle(entry, UNWRITTEN)  # closed: nothing will write it
            return
        self._queue.put(entry)
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="crawlfleet-errors", daemon=True
                )
                self._thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Write what is pending (waiting at most *timeout* seconds), then stop. A
        record whose *done* waits is settled :data:`UNWRITTEN` if the writer stops
        without writing it (or, when the state DB is still busy at *timeout*, once the
        thread gives it up)."""
        self._stop.set()
        self._nudge.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                logger.warning(
                    "Error registry: %d record(s) not written at close (state DB too slow)",
                    self._queue.qsize(),
                )
            else:
                for entry in self._drain():  # put while the thread was ending
                    _settle(entry, UNWRITTEN)
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
        held: list[_Entry] = []
        unusable = False  # said once: the state DB cannot be brought up to date
        outage = Outage(
            "the state DB",
            every=None,
            say_down=lambda exc: logger.warning(
                "Error registry: the state DB does not answer (%s); %d record(s) wait",
                type(exc).__name__,
                len(held),
            ),
            say_back=lambda seconds: logger.info(
                "Error registry: state DB back after %.0f s", seconds
            ),
        )
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
                    outcome = WRITTEN
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
                        outcome = REFUSED
                    _settle(held.pop(0), outcome)
                    self.written += 1
                if not held:
                    outage.succeeded()  # what waited is written: the outage is over
            except SQLAlchemyError as exc:
                outage.failed(exc)
                if not stopping:
                    self._pause(RETRY_SECONDS)
                    continue
            except ConfigError as exc:  # answers, but can never hold them as it is
                if not unusable:
                    logger.error("Error registry: %s; failure records are not kept", exc)
                    unusable = True
                for entry in held:
                    _settle(entry, REFUSED)
                held = []
            except Exception:
                logger.exception("Error registry: %d record(s) could not be written", len(held))
                for entry in held:
                    _settle(entry, REFUSED)
                held = []
            if stopping and self._queue.empty():
                break
            self._pause(FLUSH_SECONDS)
        if held:
            logger.warning(
                "Error registry: %d record(s) not written: the state DB did not answer "
                "before the node stopped",
                len(held),
            )
            for entry in held:
                _settle(entry, UNWRITTEN)
        if db is not None:
            db.close()

    def _pause(self, seconds: float) -> None:
        """Wait *seconds*, or until nudged (close, flush)."""
        self._nudge.wait(seconds)
        self._nudge.clear()

    def _drain(self) -> list[_Entry]:
        out = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    @staticmethod
    def _write(db: Any, entry: _Entry) -> None:
        from crawlfleet.state.errors import record_failures, resolve_errors

        kind, value, _done = entry
        if kind == "failure":
            record_failures(db, [value])
        elif kind == "unit":
            from crawlfleet.state.campaigns import finish_unit

            unit_id, ok, error = value
            finish_unit(db, unit_id, ok=ok, error=error)
        else:
            job, eid = value
            resolve_errors(db, job, [eid])


def _settle(entry: _Entry, outcome: Outcome) -> None:
    """Tell whoever waits for *entry* what became of it."""
    done = entry[2]
    if done is not None:
        try:
            done(outcome)
        except Exception:
            logger.exception("Error registry: a record's callback failed")


def _url_of(entry: _Entry) -> str:
    kind, value, _done = entry
    if kind == "unit":
        return f"campaign unit {value[0]}"
    return str(value.url) if kind == "failure" else f"error {value[1]}"
