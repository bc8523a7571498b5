"""Item workers: move items from a job's Redis stream into a store.

Nodes with :class:`~crawlfleet.pipelines.stream.RedisStreamPipeline` append items to
``<prefix>:{<job>}:items``; any number of :class:`ItemWorker` processes
(``crawlfleet items work JOB --to URL``) read that stream through a Redis consumer
group and upsert the items into SQL (:class:`~crawlfleet.pipelines.sql.SqlSink`) or
MongoDB (:class:`~crawlfleet.pipelines.mongo.MongoSink`). Workers of one group share
the items; every group gets all of them (e.g. one group into PostgreSQL, one into
MongoDB).

Guarantees:

- **At least once**: an entry is acknowledged (``XACK``) only after the store committed
  its batch. A worker that dies leaves its entries pending in the group; another worker
  claims them (``XAUTOCLAIM``) once they have been idle for
  ``CRAWLFLEET_ITEMS_CLAIM_IDLE_SECONDS``, and a worker restarted under the same
  consumer name takes its own pending entries first.
- **No duplicate rows**: writes are upserts by item key, so an entry written twice
  (claimed from a slow worker, or appended twice) leaves one row. Within a batch the
  latest entry of a key wins; across workers the last write wins.
- **Marks** (entries saying an item's page is gone, see
  :mod:`crawlfleet.pipelines.stream`) are applied with the store's own mark, after the
  items of their batch (a mark followed by an item of its key is left out: the item
  replaces it); a mark of a key the store does not hold changes nothing.
- **Bad entries never stop a worker**: an entry that cannot be decoded, or a record the
  store refuses for its data, is logged, counted and moved to the job's dead-letter
  stream ``<prefix>:{<job>}:items:dead`` (with its id, the reason, and its fields),
  atomically with its acknowledgement (``items_done.lua``).
- **Store or Redis down**: the batch in hand is retried with back-off
  (``CRAWLFLEET_STORE_RETRY_MIN/MAX_SECONDS``) and nothing new is read meanwhile; the
  stream is the buffer.
- **Bounded memory**: with ``CRAWLFLEET_ITEMS_DELETE_STORED``, an entry is deleted from
  the stream once every group of the stream has stored it. Consumers of dead workers
  are forgotten once they hold nothing and have been idle for an hour.
- **Clean stop**: :meth:`ItemWorker.stop` (SIGINT/SIGTERM in the command) ends the
  worker after the batch in hand is stored and acknowledged; a store that is down at
  that moment leaves the batch pending for the next worker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import RedisClusterException, RedisError, ResponseError

from crawlfleet.exceptions import MalformedEntry
from crawlfleet.outage import Backoff, Outage
from crawlfleet.pipelines._threads import run_in_thread
from crawlfleet.pipelines._util import describe_error
from crawlfleet.pipelines.buffered import BufferedSink, in_batches
from crawlfleet.pipelines.sinks import Record
from crawlfleet.pipelines.stream import decode_record, is_transient_redis_error
from crawlfleet.pipelines.worker_options import WorkerOptions, WorkerReport
from crawlfleet.redis.connection import REDIS_FAILURES
from crawlfleet.redis.keys import JobKeys
from crawlfleet.redis.replies import text
from crawlfleet.redis.scripts import script_source

__all__ = ["ItemWorker"]

logger = logging.getLogger(__name__)

#: How often a worker logs its progress while items flow.
_PROGRESS_LOG_SECONDS = 30.0
#: How often a worker forgets consumers of dead workers (see items_prune.lua).
_PRUNE_EVERY_SECONDS = 60.0
#: Consumers holding nothing that have not read for this long are forgotten.
_PRUNE_IDLE_SECONDS = 3600.0
#: Longest blocking read in --until-empty mode: the worker checks for "drained" this often.
_UNTIL_EMPTY_BLOCK_SECONDS = 0.1

Entry = tuple[bytes, dict[bytes, bytes]]


class ItemWorker:
    """Moves the items of one job's stream into *store* (see the module docstring).

    *client* is an asyncio Redis client; *store* a sink used for its blocking store
    operations only (``setup``, ``write_batch``, ``is_transient``, ``teardown``; its
    own buffer and thread are not used: the stream is the buffer).
    """

    def __init__(
        self,
        client: Redis,
        keys: JobKeys,
        store: BufferedSink,
        options: WorkerOptions | None = None,
    ) -> None:
        self.client = client
        self.keys = keys
        self.store = store
        self.options = options or WorkerOptions()
        self.report = WorkerReport()
        self._done_script: AsyncScript = client.register_script(script_source("items_done"))
        self._prune_script: AsyncScript = client.register_script(script_source("items_prune"))
        self._stop: asyncio.Event | None = None
        self._stop_requested = False
        self._store_ready = False
        self._group_ready = False
        self._own_pending = True
        self._claim_cursor: bytes = b"0-0"
        self._next_claim = 0.0
        self._next_prune = 0.0
        self._next_progress = 0.0
        self._redis_backoff = Backoff(
            self.options.retry_min_seconds, self.options.retry_max_seconds
        )
        consumer = self.options.consumer
        self._redis_outage = Outage(
            "Redis",
            every=None,
            say_down=lambda exc: logger.warning(
                "Redis is unreachable for item worker %s (%s); retrying in %.1f s",
                consumer,
                describe_error(exc),
                self._redis_backoff.delay,
            ),
            say_back=lambda seconds: logger.warning(
                "Redis is back for item worker %s after %.1f s", consumer, seconds
            ),
        )

    @property
    def _claim_interval(self) -> float:
        return min(max(self.options.claim_idle_seconds / 2, 0.05), 30.0)

    def stop(self) -> None:
        """Stop after the batch in hand (safe to call from a signal handler on the loop)."""
        self._stop_requested = True
        if self._stop is not None:
            self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop_requested

    async def _sleep(self, seconds: float) -> bool:
        """Wait *seconds*; True (at once) if a stop was requested."""
        assert self._stop is not None
        try:
            await asyncio.wait_for(self._stop.wait(), max(seconds, 0.0))
        except TimeoutError:
            return False
        return True

    # --- the loop --------------------------------------------------------------------

    async def run(self) -> WorkerReport:
        """Work until :meth:`stop` (or, with ``until_empty``, until the group is drained)."""
        self._stop = asyncio.Event()
        if self._stop_requested:
            self._stop.set()
        opts = self.options
        logger.info(
            "Item worker %s (group %s) moving items of job %s to %s",
            opts.consumer,
            opts.group,
            self.keys.job,
            self.store.target,
        )
        started = time.monotonic()
        self._next_progress = started + _PROGRESS_LOG_SECONDS
        try:
            while not self._stop.is_set():
                try:
                    if not self._group_ready:
                        await self._ensure_group()
                        self._group_ready = True
                    entries = await self._next_entries()
                    self._redis_back()
                    if entries:
                        await self._process(entries)
                    elif opts.until_empty and await self._drained():
                        break
                except REDIS_FAILURES as exc:
                    if not await self._redis_trouble(exc):
                        raise
                self._log_progress()
            self.report.left_pending = await self._own_pending_count()
        finally:
            await run_in_thread(self.store.teardown)
        r = self.report
        logger.info(
            "Item worker %s stopped after %.1f s: %d entries read (%d claimed), %d records "
            "stored, %d acknowledged, %d dead-lettered, %d deleted from the stream, "
            "%d left pending",
            opts.consumer,
            time.monotonic() - started,
            r.read,
            r.claimed,
            r.stored,
            r.acknowledged,
            r.dead_lettered,
            r.deleted,
            r.left_pending,
        )
        return r

    async def _ensure_group(self) -> None:
        """Create the group (reading from the stream's start) if it does not exist. A
        group new on a stream whose entries other groups already deleted says how many
        it missed: declare every group in CRAWLFLEET_ITEMS_GROUPS before the crawl."""
        try:
            await self.client.xgroup_create(
                self.keys.items, self.options.group, id="0", mkstream=True
            )
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
            return
        info = {text(k): v for k, v in (await self.client.xinfo_stream(self.keys.items)).items()}
        missed = int(info.get("entries-added") or 0) - int(info.get("length") or 0)
        if missed > 0:
            logger.warning(
                "Item group %s is new on %s: %d items added before it were already "
                "deleted by the other groups' workers; it gets the items from now on. "
                "Declare every group in CRAWLFLEET_ITEMS_GROUPS before the crawl so that "
                "each gets every item",
                self.options.group,
                self.keys.items,
                missed,
            )

    async def _next_entries(self) -> list[Entry]:
        """Own pending entries first (after a restart or a lost reply), then entries of
        dead workers when a claim is due, then new entries (blocking read)."""
        opts = self.options
        if self._own_pending:
            entries = await self._read(b"0", block_ms=None)
            if entries:
                return entries
            self._own_pending = False
        now = time.monotonic()
        if now >= self._next_prune:
            self._next_prune = now + _PRUNE_EVERY_SECONDS
            await self._prune()
        if now >= self._next_claim:
            entries = await self._claim()
            # more may be waiting (cursor not back at the start): claim again soon
            more = self._claim_cursor != b"0-0"
            self._next_claim = now if more else now + self._claim_interval
            if entries:
                return entries
        block = _UNTIL_EMPTY_BLOCK_SECONDS if opts.until_empty else opts.block_seconds
        block = min(block, max(self._next_claim - time.monotonic(), 0.001))
        return await self._read(b">", block_ms=max(1, int(block * 1000)))

    async def _read(self, start: bytes, *, block_ms: int | None) -> list[Entry]:
        reply: Any = await self.client.xreadgroup(
            self.options.group,
            self.options.consumer,
            {self.keys.items: start},
            count=self.options.batch_items,
            block=block_ms,
        )
        entries: list[Entry] = []
        for _stream, items in reply or []:
            entries.extend(items)
        self.report.read += len(entries)
        return entries

    async def _claim(self) -> list[Entry]:
        opts = self.options
        reply = await self.client.xautoclaim(
            self.keys.items,
            opts.group,
            opts.consumer,
            int(opts.claim_idle_seconds * 1000),
            start_id=self._claim_cursor,
            count=opts.batch_items,
        )
        cursor, entries = reply[0], list(reply[1])
        # Redis >= 7 drops deleted entries from the pending list itself (reply[2])
        self._claim_cursor = cursor if isinstance(cursor, bytes) else str(cursor).encode()
        if entries:
            self.report.read += len(entries)
            self.report.claimed += len(entries)
            logger.warning(
                "Item worker %s claimed %d entries idle for over %.0f s (their worker "
                "stopped or died)",
                opts.consumer,
                len(entries),
                opts.claim_idle_seconds,
            )
        return entries

    async def _prune(self) -> None:
        gone = await self._prune_script(
            keys=self.keys.for_items_prune(),
            args=[
                self.options.group,
                int(max(_PRUNE_IDLE_SECONDS, self.options.claim_idle_seconds * 2) * 1000),
                self.options.consumer,
            ],
        )
        if gone:
            logger.info(
                "Item worker %s forgot idle consumers without entries: %s",
                self.options.consumer,
                ", ".join(text(name) for name in gone),
            )

    async def _drained(self) -> bool:
        """True when the group holds nothing pending (the last read found nothing new)."""
        summary = await self.client.xpending(self.keys.items, self.options.group)
        return int(summary.get("pending", 0)) == 0

    async def _own_pending_count(self) -> int:
        try:
            summary = await self.client.xpending(self.keys.items, self.options.group)
        except RedisError:
            return -1  # unknown: Redis is unreachable
        for consumer in summary.get("consumers") or []:
            if text(consumer["name"]) == self.options.consumer:
                return int(consumer["pending"])
        return 0

    # --- one batch -------------------------------------------------------------------

    async def _process(self, entries: Sequence[Entry]) -> None:
        """Decode, store, then acknowledge (or dead-letter) one batch of entries."""
        decoded: list[tuple[bytes, Record]] = []
        gone: list[bytes] = []
        dead: list[tuple[bytes, str]] = []
        for entry_id, fields in entries:
            if not fields:  # deleted while pending (trimmed): nothing to store
                gone.append(entry_id)
                continue
            try:
                decoded.append((entry_id, decode_record(fields)))
            except MalformedEntry as exc:
                dead.append((entry_id, f"malformed: {exc}"))
                logger.warning(
                    "Item stream %s: malformed entry %s moved to %s: %s",
                    self.keys.items,
                    text(entry_id),
                    self.keys.items_dead,
                    exc,
                )
        records = [record for _, record in decoded]
        items, marks = in_batches(records)
        refused: dict[str, str] = {}
        if records:
            result = await self._store(records)
            if result is None:
                return  # stopped while the store was down: the entries stay pending
            refused = result
            self.report.stored += len(items) + len(marks) - len(refused)
        stored = list(gone)
        for entry_id, record in decoded:
            if record.key in refused:
                dead.append((entry_id, f"refused by the store: {refused[record.key]}"))
            else:
                stored.append(entry_id)
        await self._finish(stored, dead)

    async def _finish(self, stored: list[bytes], dead: list[tuple[bytes, str]]) -> None:
        opts = self.options
        args: list[Any] = [opts.group, opts.consumer, "1" if opts.delete_stored else "0"]
        args += [len(stored), *stored]
        for entry_id, reason in dead:
            args += [entry_id, reason]
        try:
            acked, moved, deleted = await self._done_script(
                keys=self.keys.for_items_done(), args=args
            )
        except RedisError:
            self._own_pending = True  # stored but maybe not acknowledged: read them again
            raise
        self.report.acknowledged += int(acked)
        self.report.dead_lettered += int(moved)
        self.report.deleted += int(deleted)

    async def _store(self, records: list[Record]) -> dict[str, str] | None:
        """Write *records* until the store confirms; return key -> reason of the records
        it refused, or None if a stop came while the store was down."""
        target = self.store.target
        backoff = Backoff(self.options.retry_min_seconds, self.options.retry_max_seconds)
        outage = Outage(
            target,
            every=0.0,
            say_down=lambda exc: logger.warning(
                "Item store %s is unreachable (%s); %d items wait in the stream, "
                "retrying in %.1f s",
                target,
                describe_error(exc),
                len(records),
                backoff.delay,
            ),
            say_still=lambda exc, seconds: logger.info(
                "Item store %s still unreachable after %.0f s (%s)",
                target,
                seconds,
                describe_error(exc),
            ),
            say_back=lambda seconds: logger.warning(
                "Item store %s is back after %.1f s", target, seconds
            ),
        )
        while True:
            try:
                if not self._store_ready:
                    await run_in_thread(self.store.setup)
                    self._store_ready = True
                refused = await run_in_thread(self._write, records)
            except Exception as exc:
                self._store_ready = False
                self.report.retries += 1
                outage.failed(exc)
                if await self._sleep(backoff.next()):
                    logger.warning(
                        "Item worker %s stopping with the store down: %d entries stay "
                        "pending for the next worker",
                        self.options.consumer,
                        len(records),
                    )
                    return None
                continue
            outage.succeeded()
            return refused

    def _write(self, records: list[Record]) -> dict[str, str]:
        """Write *records* through the store's isolating writer; return key -> reason of
        the records it refused. Transient errors propagate (the batch is retried). Runs
        on a worker thread."""
        refused: dict[str, str] = {}

        def refuse(record: Record, exc: BaseException) -> None:
            refused[record.key] = describe_error(exc)
            logger.error(
                "Item store %s refused item %s from %s: %s",
                self.store.target,
                record.key,
                record.url,
                refused[record.key],
            )

        self.store.write_isolating(records, refuse)
        return refused

    # --- Redis trouble ---------------------------------------------------------------

    async def _redis_trouble(self, exc: RedisError | RedisClusterException) -> bool:
        """Handle a Redis error of the loop; False if it is not one to retry."""
        self._own_pending = True  # a reply may have been lost: re-read what we hold
        self._group_ready = False  # Redis may have restarted without its data
        if isinstance(exc, ResponseError) and "NOGROUP" in str(exc):
            # the stream or group was deleted (job reset, Redis without persistence)
            logger.warning(
                "Item stream %s has no group %s any more; creating it again",
                self.keys.items,
                self.options.group,
            )
            return True
        if not is_transient_redis_error(exc):
            return False
        self.report.retries += 1
        self._redis_outage.failed(exc)
        await self._sleep(self._redis_backoff.next())
        return True

    def _redis_back(self) -> None:
        if self._redis_outage.succeeded() is not None:
            self._redis_backoff.reset()

    def _log_progress(self) -> None:
        now = time.monotonic()
        if now >= self._next_progress:
            self._next_progress = now + _PROGRESS_LOG_SECONDS
            logger.info(
                "Item worker %s: %d records stored, %d dead-lettered so far",
                self.options.consumer,
                self.report.stored,
                self.report.dead_lettered,
            )
