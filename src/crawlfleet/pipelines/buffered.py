"""A sink base that buffers, batches, retries and never loses what it accepted.

:class:`BufferedSink` keeps accepted records in a bounded FIFO buffer. One worker thread
takes batches from its head and writes them with the subclass's blocking
:meth:`~BufferedSink.write_batch`: when ``batch_items`` are there, or once the oldest
record has waited ``batch_seconds``, or ``SAVE_LINGER_SECONDS`` (50 ms) when somebody
awaits a record's durability (:meth:`~BufferedSink.save`: a group commit, whatever
arrives meanwhile shares it). A record
leaves the buffer only after its batch was written, so:

- a store that is down (transient error, see :meth:`~BufferedSink.is_transient`) is
  retried with exponential back-off (``retry_min_seconds`` doubling up to
  ``retry_max_seconds``), with one WARNING when it goes down and one when it is back
  (once :meth:`~BufferedSink.setup` succeeds again, before anything is written: it
  counts every record waiting); :attr:`~BufferedSink.unreachable` says so meanwhile
  (the node stops leasing past ``CRAWLFLEET_ITEMS_PENDING_MAX`` waiting records, see
  :mod:`crawlfleet.node.backlog`);
- when the buffer is full, :meth:`~BufferedSink.put` waits: back-pressure on the crawl;
- a batch that fails for another reason (bad data) is written record by record, and only
  the records the store refuses are set aside: ERROR log, stats ``rejected``, and a line
  in ``<spill dir>/<spill id>-rejected.jsonl``;
- while :attr:`~BufferedSink.stopping` says so (the store pipeline sets it to "the
  crawl is stopping") and the store is down, the records that callers of
  :meth:`~BufferedSink.save` wait for are given up within a second: they leave the
  buffer and ``save`` raises :class:`~crawlfleet.exceptions.ItemNotDurable` (the
  caller still owns the item: the crawl puts its page back in the frontier), so a
  shutdown is not held up by a store that is down;
- on close the worker flushes for up to ``close_timeout_seconds``; what is left is saved
  to ``<spill dir>/<spill id>-<time>.jsonl`` (ERROR log naming the count and file) and
  written first when a sink with the same spill id opens next time.

Marks (:class:`~crawlfleet.pipelines.sinks.ItemMark`) take the same path as items:
buffered, batched with them (the items of a batch first, then its marks, in one call of
:meth:`~BufferedSink.write_batch`: a mark follows the item it marks, and an item after
a mark of its key replaces it, so that mark is left out), retried, spilled and replayed;
a :meth:`~BufferedSink.save` of a mark returns once it is durable.

Stats (``crawlfleet/store/<name>/``): ``written`` (items), ``marked`` (marks),
``batches``, ``retries``,
``rejected``, ``waits`` (puts that waited for room), ``given_up`` (saves given up while
stopping), ``unwritten`` (left at close), ``replayed`` (records read back from spill
files).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from abc import abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Self

from scrapy.settings import BaseSettings
from scrapy.statscollectors import StatsCollector

from crawlfleet.exceptions import ConfigError, ItemNotDurable
from crawlfleet.outage import Backoff, Outage
from crawlfleet.pipelines._threads import Completion, Wakeup, run_in_thread, settle
from crawlfleet.pipelines._util import describe_error
from crawlfleet.pipelines.sinks import ItemMark, ItemSink, Record, StoredItem, record_from_json
from crawlfleet.settings.access import get_float, get_int, get_path

__all__ = ["BufferedSink", "StoreOptions", "in_batches"]

logger = logging.getLogger(__name__)

#: Records somebody awaits (save) wait at most this long for more to share their commit:
#: a commit per page would cost the crawl CPU; this costs each page that much latency.
SAVE_LINGER_SECONDS = 0.05
#: A full buffer is logged at most this often (it may fill many times a second).
_FULL_LOG_INTERVAL_SECONDS = 60.0

#: A buffered record: when it was accepted, the record, and who awaits its durability.
_Entry = tuple[float, Record, Completion | None]


@dataclass(frozen=True)
class StoreOptions:
    """Buffering and retry behaviour shared by every store (CRAWLFLEET_STORE_*)."""

    batch_items: int = 500
    batch_seconds: float = 1.0
    buffer_items: int = 10_000
    retry_min_seconds: float = 0.5
    retry_max_seconds: float = 30.0
    close_timeout_seconds: float = 60.0
    #: Where unwritten and rejected records are saved; None: nowhere (they are logged).
    spill_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.batch_items < 1:
            raise ValueError(f"batch_items must be >= 1, got {self.batch_items}")
        if self.buffer_items < self.batch_items:
            raise ValueError(
                f"buffer_items ({self.buffer_items}) must be >= batch_items ({self.batch_items})"
            )
        if self.batch_seconds < 0 or self.close_timeout_seconds < 0:
            raise ValueError("batch_seconds and close_timeout_seconds must be >= 0")
        if not 0 < self.retry_min_seconds <= self.retry_max_seconds:
            raise ValueError("retry seconds must satisfy 0 < retry_min <= retry_max")

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        """Read the CRAWLFLEET_STORE_* settings; spill files go under CRAWLFLEET_DATA_DIR."""
        batch = get_int(settings, "CRAWLFLEET_STORE_BATCH_ITEMS", minimum=1)
        buffer = get_int(settings, "CRAWLFLEET_STORE_BUFFER_ITEMS", minimum=batch)
        low = get_float(settings, "CRAWLFLEET_STORE_RETRY_MIN_SECONDS", minimum=0, strict=True)
        high = get_float(settings, "CRAWLFLEET_STORE_RETRY_MAX_SECONDS", minimum=0, strict=True)
        if high < low:
            raise ConfigError(
                f"CRAWLFLEET_STORE_RETRY_MAX_SECONDS ({high}) must be >= "
                f"CRAWLFLEET_STORE_RETRY_MIN_SECONDS ({low})"
            )
        return cls(
            batch_items=batch,
            batch_seconds=get_float(settings, "CRAWLFLEET_STORE_BATCH_SECONDS", minimum=0),
            buffer_items=buffer,
            retry_min_seconds=low,
            retry_max_seconds=high,
            close_timeout_seconds=get_float(
                settings, "CRAWLFLEET_STORE_CLOSE_TIMEOUT_SECONDS", minimum=0
            ),
            spill_dir=get_path(settings, "CRAWLFLEET_DATA_DIR") / "unwritten",
        )


def in_batches(records: Sequence[Record]) -> tuple[list[StoredItem], list[ItemMark]]:
    """*records* as one write: the latest item of each key, then the latest mark of
    each key not followed by an item of that key (that item replaces what it marked)."""
    items: dict[str, StoredItem] = {}
    marks: dict[str, ItemMark] = {}
    for record in records:
        if isinstance(record, ItemMark):
            marks[record.key] = record
        else:
            items[record.key] = record
            marks.pop(record.key, None)
    return list(items.values()), list(marks.values())


class BufferedSink(ItemSink):
    """Base of the stores: subclasses implement the blocking store operations.

    :meth:`setup`, :meth:`write_batch` and :meth:`teardown` run on the worker thread.
    """

    def __init__(
        self, options: StoreOptions | None = None, *, stats: StatsCollector | None = None
    ) -> None:
        self.options = options or StoreOptions()
        self.stats = stats
        self._buffer: deque[_Entry] = deque()
        self._awaited = 0  # entries of the buffer with a Completion
        self._cond = threading.Condition()
        self._space = Wakeup()
        self._retry_wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closing = False
        self._abandoned = False
        self._deadline = float("inf")
        self._full_logged_at = -float("inf")
        #: set by the worker while the store is down: its last attempt failed and
        #: nothing was written since
        self._failing = False
        self._replay_files: list[Path] = []
        self._replay_left = 0
        self._run_suffix = f"{time.strftime('%Y%m%dT%H%M%S')}-{id(self):x}"
        #: When set and true while the store is down (e.g. "the crawl is stopping"), the
        #: records awaited by :meth:`save` are given up (ItemNotDurable) rather than held:
        #: a shutdown is not held up by a store that is down. Checked at least every
        #: second while the store is retried; may be called from the worker thread.
        self.stopping: Callable[[], bool] | None = None

    # --- to implement ----------------------------------------------------------------

    #: Identifies this store's spill files (unique per store target, stable over runs).
    @property
    @abstractmethod
    def spill_id(self) -> str:
        """A file-name-safe id of the store target (e.g. dialect + hash of URL and table)."""

    @abstractmethod
    def setup(self) -> None:
        """Prepare the store (connect, create tables). Called before the first write and
        again after any failure; must be idempotent, and must reach the store (raise if
        it is unreachable): once it succeeds after a failure, the store counts as back."""

    @abstractmethod
    def write_batch(self, records: Sequence[StoredItem], marks: Sequence[ItemMark] = ()) -> None:
        """Upsert *records* (distinct keys), then apply *marks* (distinct keys: each a
        partial update of the stored item with its key, a no-op when there is none), in
        one transaction, or raise."""

    @abstractmethod
    def is_transient(self, exc: BaseException) -> bool:
        """True if *exc* means the store is unreachable or busy (retry the same batch);
        False if the data was refused (write record by record, set refused ones aside)."""

    @property
    def target(self) -> str:
        """What this sink writes to, for log lines (no passwords)."""
        return self.name

    def teardown(self) -> None:
        """Release connections. Called once on the worker thread when it ends."""

    # --- ItemSink --------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Records accepted but not yet written."""
        return len(self._buffer)

    @property
    def unreachable(self) -> bool:
        """The store is down: its last attempt failed and nothing was written since.
        Safe from any thread."""
        return self._failing

    def open(self) -> None:
        """Load spill files of an earlier run, then start the worker thread."""
        if self._thread is not None:
            raise RuntimeError(f"item store {self.name} is already open")
        self._replay_spills()
        self._thread = threading.Thread(
            target=self._run, name=f"crawlfleet-store-{self.name}", daemon=True
        )
        self._thread.start()

    async def put(self, record: Record) -> None:
        """Buffer *record* (an item or a mark); wait while the buffer is full."""
        await self._accept(record, None)

    async def save(self, record: Record) -> None:
        """Buffer *record* (an item or a mark) and return once it is durable: written
        by the store, or refused as bad data and set aside (see the module docstring). Raises
        ItemNotDurable if the sink gives it up (:attr:`stopping` while the store is
        down); the record is then not written by this sink."""
        completion = Completion()
        await self._accept(record, completion)
        await completion.wait()

    def _giving_up(self) -> bool:
        """The store is down and the crawl is stopping: awaited records are given up."""
        return self._failing and self.stopping is not None and self.stopping()

    def _not_durable(self) -> ItemNotDurable:
        return ItemNotDurable(
            f"not stored: item store {self.target} is unreachable and the crawl is stopping"
        )

    async def _accept(self, record: Record, completion: Completion | None) -> None:
        if self._closing or self._thread is None:
            raise RuntimeError(f"item store {self.name} is not open")
        while True:
            with self._cond:
                if completion is not None and self._giving_up():
                    self._inc("given_up")
                    raise self._not_durable()
                size = len(self._buffer)
                if size < self.options.buffer_items:
                    self._buffer.append((time.monotonic(), record, completion))
                    if completion is not None:
                        self._awaited += 1
                    if size == 0 or completion is not None or size + 1 >= self.options.batch_items:
                        self._cond.notify()
                    return
                waiter = self._space.wait()
            now = time.monotonic()
            if now - self._full_logged_at >= _FULL_LOG_INTERVAL_SECONDS:
                self._full_logged_at = now
                logger.warning(
                    "Item store %s: buffer full (%d items); the crawl waits for the store",
                    self.target,
                    size,
                )
            self._inc("waits")
            await waiter

    async def close(self) -> int:
        """Flush for at most ``close_timeout_seconds``; spill and count what is left."""
        if self._thread is None:
            return 0
        with self._cond:
            self._closing = True
            self._deadline = time.monotonic() + self.options.close_timeout_seconds
            self._cond.notify_all()
        self._retry_wake.set()
        await run_in_thread(self._thread.join, self.options.close_timeout_seconds + 1.0)
        with self._cond:
            self._abandoned = True
            left = [record for _, record, _ in self._buffer]
            awaited = [c for _, _, c in self._buffer if c is not None]
            self._buffer.clear()
            self._awaited = 0
        settle(awaited, self._not_durable())
        self._space.notify_all()
        if not left:
            self._remove_replayed_files()
            return 0
        self._inc("unwritten", len(left))
        where = self._spill(left, self._run_suffix)
        self._remove_replayed_files()
        logger.error(
            "Item store %s: %d items were not written within %.0f s; %s",
            self.target,
            len(left),
            self.options.close_timeout_seconds,
            f"saved to {where}, written at the next start" if where else "they are lost",
        )
        return len(left)

    # --- worker ----------------------------------------------------------------------

    def _inc(self, name: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(f"crawlfleet/store/{self.name}/{name}", count)

    def _next_batch(self) -> list[Record] | None:
        """Wait for a batch to be due; None when closing with an empty buffer."""
        opts = self.options
        with self._cond:
            while True:
                if self._abandoned or (self._closing and not self._buffer):
                    return None
                if self._buffer:
                    age = time.monotonic() - self._buffer[0][0]
                    if self._closing or len(self._buffer) >= opts.batch_items:
                        break
                    # awaited records linger a little: one commit for what arrives then
                    linger = min(opts.batch_seconds, SAVE_LINGER_SECONDS)
                    wait = linger if self._awaited else opts.batch_seconds
                    if age >= wait:
                        break
                    self._cond.wait(wait - age)
                else:
                    self._cond.wait()
            return [record for _, record, _ in islice(self._buffer, opts.batch_items)]

    def _run(self) -> None:
        backoff = Backoff(self.options.retry_min_seconds, self.options.retry_max_seconds)
        target = self.target
        # the store is back once setup succeeds: said then, with every record waiting,
        # before the first of them is written (unreachable holds until one is written)
        outage = Outage(
            target,
            every=0.0,
            say_down=lambda exc: logger.warning(
                "Item store %s is unreachable (%s); %d items wait in memory, retrying in %.1f s",
                target,
                describe_error(exc),
                len(self._buffer),
                backoff.delay,
            ),
            say_still=lambda exc, seconds: logger.info(
                "Item store %s still unreachable after %.0f s (%s); %d items waiting",
                target,
                seconds,
                describe_error(exc),
                len(self._buffer),
            ),
            say_back=lambda seconds: logger.warning(
                "Item store %s is back after %.1f s; writing %d waiting items",
                target,
                seconds,
                len(self._buffer),
            ),
        )
        ready = False
        try:
            while (batch := self._next_batch()) is not None:
                try:
                    if not ready:
                        self.setup()
                        ready = True
                        outage.succeeded()
                    refused = self.write_isolating(batch, self._reject)
                except Exception as exc:
                    ready = False
                    self._inc("retries")
                    self._failing = True
                    outage.failed(exc)
                    now = time.monotonic()
                    if self._closing and now >= self._deadline:
                        return
                    self._pause(min(backoff.next(), max(0.0, self._deadline - now)))
                    continue
                marks = sum(1 for record in batch if isinstance(record, ItemMark))
                self._done(len(batch), refused, marks)
                if self._failing:
                    self._failing = False
                    backoff.reset()
        except BaseException:
            logger.exception(
                "Item store %s: writer thread failed; %d items stay in memory until close",
                self.target,
                len(self._buffer),
            )
            raise
        finally:
            try:
                self.teardown()
            except Exception:
                logger.exception("Item store %s: error while closing", self.target)

    def _pause(self, seconds: float) -> None:
        """Sleep before a retry (cut short by close); every second, give up the awaited
        records if the crawl is stopping (:attr:`stopping`)."""
        end = time.monotonic() + seconds
        while True:
            self._give_up_awaited()
            left = end - time.monotonic()
            if left <= 0 or self._retry_wake.wait(min(left, 1.0)):
                break
        self._retry_wake.clear()

    def _give_up_awaited(self) -> None:
        """While :meth:`_giving_up`: drop the records somebody awaits from the buffer and
        fail their saves (ItemNotDurable). Worker thread, between batches only."""
        with self._cond:
            if not self._awaited or not self._giving_up():
                return
            given_up = [c for _, _, c in self._buffer if c is not None]
            self._buffer = deque(e for e in self._buffer if e[2] is None)
            self._awaited = 0
        self._inc("given_up", len(given_up))
        logger.warning(
            "Item store %s is unreachable while the crawl stops: %d items not stored, "
            "their pages go back to the frontier",
            self.target,
            len(given_up),
        )
        settle(given_up, self._not_durable())
        self._space.notify_all()

    def _done(self, count: int, refused: int = 0, marks: int = 0) -> None:
        """Remove the *count* records handled (written or *refused*; *marks* of them
        marks) from the head of the buffer."""
        durable: list[Completion] = []
        with self._cond:
            if self._abandoned:
                return
            for _ in range(min(count, len(self._buffer))):
                completion = self._buffer.popleft()[2]
                if completion is not None:
                    durable.append(completion)
            self._awaited -= len(durable)
        settle(durable)
        self._inc("written", max(0, count - refused - marks))
        if marks:
            self._inc("marked", marks)
        self._inc("batches")
        self._space.notify_all()
        if self._replay_left:
            self._replay_left = max(0, self._replay_left - count)
            if not self._replay_left:
                self._remove_replayed_files()

    def write_isolating(
        self,
        records: Sequence[Record],
        refuse: Callable[[Record, BaseException], None],
    ) -> int:
        """Write *records* (items and marks, in their order: see :func:`in_batches`) in
        one batch; when the store refuses the batch for its data, write them one by
        one, so that one bad record cannot hold back the others: *refuse* is called
        with each record the store refuses and its error. Returns how many it refused.
        A transient error (:meth:`is_transient`) propagates: the caller retries the
        whole batch (upserts and marks make writing a record twice harmless).
        Blocking: run on a worker thread."""
        items, marks = in_batches(records)
        try:
            self.write_batch(items, marks)
            return 0
        except Exception as exc:
            if self.is_transient(exc):
                raise
            logger.warning(
                "Item store %s refused a batch of %d (%s); writing one by one",
                self.target,
                len(items) + len(marks),
                describe_error(exc),
            )
        self.setup()
        refused = 0
        one_by_one: list[Record] = [*items, *marks]
        for record in one_by_one:
            try:
                if isinstance(record, ItemMark):
                    self.write_batch((), [record])
                else:
                    self.write_batch([record])
            except Exception as exc:
                if self.is_transient(exc):
                    raise
                refuse(record, exc)
                refused += 1
        return refused

    def _reject(self, record: Record, exc: BaseException) -> None:
        """Set *record*, refused by the store, aside: counted, logged, spilled."""
        self._inc("rejected")
        where = self._spill([record], "rejected")
        logger.error(
            "Item store %s refused %s %s from %s: %s%s",
            self.target,
            "the mark of item" if isinstance(record, ItemMark) else "item",
            record.key,
            record.url,
            describe_error(exc),
            f" (saved to {where})" if where else "",
        )

    # --- spill files -----------------------------------------------------------------

    def _spill_path(self, suffix: str) -> Path | None:
        if self.options.spill_dir is None:
            return None
        return self.options.spill_dir / f"{self.spill_id}-{suffix}.jsonl"

    def _spill(self, records: list[Record], suffix: str) -> Path | None:
        """Append *records* to a JSON-lines spill file; None if there is no spill dir."""
        path = self._spill_path(suffix)
        if path is None:
            return None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as fh:
                for record in records:
                    fh.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
        except OSError as exc:
            logger.error("Item store %s: cannot write %s: %s", self.target, path, exc)
            return None
        return path

    def _replay_spills(self) -> None:
        spill_dir = self.options.spill_dir
        if spill_dir is None or not spill_dir.is_dir():
            return
        now = time.monotonic()
        for path in sorted(spill_dir.glob(f"{self.spill_id}-*.jsonl")):
            if path.name.endswith("-rejected.jsonl"):
                continue
            count = 0
            with path.open(encoding="utf-8") as fh:
                for number, line in enumerate(fh, 1):
                    try:
                        record = record_from_json(json.loads(line))
                    except ValueError as exc:
                        logger.error(
                            "Item store %s: %s line %d skipped: %s", self.target, path, number, exc
                        )
                        continue
                    self._buffer.append((now, record, None))
                    count += 1
            self._replay_files.append(path)
            self._replay_left += count
            self._inc("replayed", count)
            logger.warning(
                "Item store %s: %d items left unwritten by an earlier run read from %s",
                self.target,
                count,
                path,
            )
        if self._replay_files and not self._replay_left:
            self._remove_replayed_files()

    def _remove_replayed_files(self) -> None:
        files, self._replay_files = self._replay_files, []
        for path in files:
            path.unlink(missing_ok=True)
