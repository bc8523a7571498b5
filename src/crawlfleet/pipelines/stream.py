"""Redis stream item store: items go to a stream per job, for separate item workers.

Crawling and item processing then scale separately: nodes append their items to the
job's stream (``<prefix>:{<job>}:items``, see :mod:`crawlfleet.redis.keys`) and any
number of ``crawlfleet items work`` processes move them into SQL or MongoDB (see
:mod:`crawlfleet.pipelines.workers`).

Entry format, version 1 (no pickle: every value is text)::

    v     "1"
    key   the item key (upsert key)
    job   the job that wrote the item
    type  the item type
    url   the page of the item (absent when the item has none)
    doc   the item's public fields, a JSON object (UTF-8)

A mark (:class:`~crawlfleet.pipelines.sinks.ItemMark`: the item's page was found gone)
is an entry of the same version with ``v``, ``key``, ``job``, ``url`` (when known) and
``gone`` (its ``gone_at``, ISO 8601) instead of ``type`` and ``doc``: workers apply it
to their store with the store's own mark, after the items read before it (a worker older
than marks dead-letters it as malformed).

A reader rejects any other version and any entry missing a field or with a ``doc`` that
is not a JSON object (:class:`~crawlfleet.exceptions.MalformedEntry`).

Appending uses :class:`~crawlfleet.pipelines.buffered.BufferedSink`: batches of up to
``CRAWLFLEET_STORE_BATCH_ITEMS`` go in one pipelined round trip (one ``XADD`` per
item), from the store's worker thread; while Redis is down items wait in the bounded
buffer and are retried, and a full buffer makes the crawl wait. A batch retried after a
connection was cut mid-reply may append some items twice: workers upsert by key, so that
leaves no duplicate rows. ``CRAWLFLEET_ITEMS_STREAM_MAXLEN`` > 0 trims the stream
(approximately) to that many entries, dropping the oldest even if no worker took them;
the default 0 never trims (workers delete the entries every group has stored).

Inside Scrapy the sink uses the process's shared asyncio Redis client: its batches run
as coroutines on the reactor's loop (the worker thread only waits for them). Built with a
URL only (tools, tests), it keeps a blocking client of its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import hashlib
import json
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import redis
from redis.asyncio import Redis as AsyncRedis
from redis.backoff import NoBackoff
from redis.retry import Retry
from scrapy.crawler import Crawler
from scrapy.settings import BaseSettings
from scrapy.statscollectors import StatsCollector

from crawlfleet.exceptions import ConfigError, MalformedEntry
from crawlfleet.frontier.config import validate_job_name
from crawlfleet.pipelines.buffered import BufferedSink, StoreOptions
from crawlfleet.pipelines.sinks import GONE_AT, ItemMark, Record, StoredItem
from crawlfleet.pipelines.store import StorePipeline
from crawlfleet.redis.config import RedisConfig
from crawlfleet.redis.connection import resolve_url, shared_client
from crawlfleet.redis.keys import JobKeys, jobs_key
from crawlfleet.redis.replies import text
from crawlfleet.settings.access import get_int, get_str, raw_setting

__all__ = [
    "ENTRY_VERSION",
    "RedisStreamPipeline",
    "RedisStreamSink",
    "decode_entry",
    "decode_record",
    "encode_entry",
    "encode_record",
    "entry_time",
    "is_mark_entry",
    "is_transient_redis_error",
    "redis_identity",
    "stream_status",
]

_T = TypeVar("_T")

#: Version written in the ``v`` field of every entry.
ENTRY_VERSION = 1
_VERSION = str(ENTRY_VERSION).encode()
_REQUIRED = (b"key", b"job", b"type", b"doc")
#: The field of a mark's entry that holds its gone_at.
_MARK = b"gone"
#: Longest wait of the worker thread for a batch sent on the reactor's loop; the shared
#: client's own timeouts and retries normally end it much sooner.
_LOOP_WRITE_TIMEOUT_SECONDS = 120.0
#: Entries read per XRANGE call by get() and count().
_SCAN_CHUNK = 1000


def encode_entry(record: StoredItem) -> dict[bytes, bytes]:
    """The stream fields of *record* (see the module docstring)."""
    fields = {
        b"v": _VERSION,
        b"key": record.key.encode(),
        b"job": record.job.encode(),
        b"type": record.item_type.encode(),
        b"doc": json.dumps(record.document, ensure_ascii=False, separators=(",", ":")).encode(),
    }
    if record.url is not None:
        fields[b"url"] = record.url.encode()
    return fields


def encode_mark(mark: ItemMark) -> dict[bytes, bytes]:
    """The stream fields of *mark* (see the module docstring)."""
    fields = {
        b"v": _VERSION,
        b"key": mark.key.encode(),
        b"job": mark.job.encode(),
        _MARK: mark.gone_at.encode(),
    }
    if mark.url is not None:
        fields[b"url"] = mark.url.encode()
    return fields


def encode_record(record: Record) -> dict[bytes, bytes]:
    """The stream fields of an item or a mark."""
    return encode_mark(record) if isinstance(record, ItemMark) else encode_entry(record)


def is_mark_entry(fields: Mapping[bytes, bytes]) -> bool:
    """True for the fields of a mark's entry (not an item's)."""
    return _MARK in fields


def decode_record(fields: Mapping[bytes, bytes]) -> Record:
    """The item or mark in stream entry *fields*; raises MalformedEntry saying what is
    wrong."""
    if not is_mark_entry(fields):
        return decode_entry(fields)
    if fields.get(b"v") != _VERSION:
        raise MalformedEntry(f"mark entry version is not {ENTRY_VERSION}")
    missing = [n.decode() for n in (b"key", b"job", _MARK) if not fields.get(n)]
    if missing:
        raise MalformedEntry(f"mark entry without {', '.join(missing)}")
    try:
        key, job, when = (fields[n].decode() for n in (b"key", b"job", _MARK))
        url = fields[b"url"].decode() if b"url" in fields else None
    except UnicodeDecodeError as exc:
        raise MalformedEntry(f"entry is not UTF-8 text: {exc}") from None
    return ItemMark(key, job, url, when)


def decode_entry(fields: Mapping[bytes, bytes]) -> StoredItem:
    """The item in stream entry *fields*; raises MalformedEntry saying what is wrong (a
    mark's entry too: :func:`decode_record` reads both)."""
    version = fields.get(b"v")
    if version != _VERSION:
        shown = "missing" if version is None else repr(version[:20])
        raise MalformedEntry(f"entry version {shown}, expected {ENTRY_VERSION}")
    missing = [name.decode() for name in _REQUIRED if not fields.get(name)]
    if missing:
        raise MalformedEntry(f"entry without {', '.join(missing)}")
    try:
        key, job, kind = (fields[name].decode() for name in (b"key", b"job", b"type"))
        url = fields[b"url"].decode() if b"url" in fields else None
        document = json.loads(fields[b"doc"])
    except UnicodeDecodeError as exc:
        raise MalformedEntry(f"entry is not UTF-8 text: {exc}") from None
    except ValueError as exc:
        raise MalformedEntry(f"entry doc is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise MalformedEntry(f"entry doc is a JSON {type(document).__name__}, not an object")
    return StoredItem(key, job, kind, url, document)


def entry_time(entry_id: bytes | str) -> dt.datetime:
    """When the entry *entry_id* was appended (UTC, naive; Redis's clock)."""
    millis = int(text(entry_id).split("-", 1)[0])
    return dt.datetime.fromtimestamp(millis / 1000, dt.UTC).replace(tzinfo=None)


_TRANSIENT_REDIS = (
    redis.exceptions.ConnectionError,  # includes BusyLoadingError (Redis loading its AOF)
    redis.exceptions.TimeoutError,
    redis.exceptions.OutOfMemoryError,  # maxmemory reached: workers will free memory
    redis.exceptions.ReadOnlyError,  # a replica after a failover
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.MasterDownError,
    OSError,
)


def is_transient_redis_error(exc: BaseException) -> bool:
    """True if *exc* means Redis is unreachable, loading, full or failing over."""
    return isinstance(exc, _TRANSIENT_REDIS)


def _raise_unexpected(replies: list[Any]) -> None:
    """Raise the first error of a pipeline's *replies*, except BUSYGROUP (a consumer
    group that exists already)."""
    for reply in replies:
        if isinstance(reply, Exception) and "BUSYGROUP" not in str(reply):
            raise reply


def item_groups(settings: BaseSettings) -> list[str]:
    """CRAWLFLEET_ITEMS_GROUP, then every name of CRAWLFLEET_ITEMS_GROUPS."""
    names = [get_str(settings, "CRAWLFLEET_ITEMS_GROUP").strip()]
    for name in settings.getlist("CRAWLFLEET_ITEMS_GROUPS"):
        group = str(name).strip()
        if not group or any(c.isspace() for c in group):
            raise ConfigError(f"CRAWLFLEET_ITEMS_GROUPS has an invalid group name {name!r}")
        names.append(group)
    return list(dict.fromkeys(n for n in names if n))


class _LoopUnavailable(ConnectionError):
    """The reactor's loop did not run a batch (stopped, closed, or too slow)."""


class RedisStreamSink(BufferedSink):
    """Item sink appending records to their job's Redis stream.

    *url* is the Redis to write to (and to read from in :meth:`get` and :meth:`count`);
    *prefix* the key prefix (``CRAWLFLEET_KEY_PREFIX``). With *client* (an asyncio client
    whose loop is running when :meth:`open` is called) writes go through that client on
    that loop; without, through a blocking client of the sink's own. *maxlen* > 0 trims
    each stream to about that many entries; 0 never trims.

    As a store, the stream keeps every version of an item until workers take it:
    :meth:`get` returns the latest entry with a key (``created_at`` from the first one)
    with the marks appended after it applied, :meth:`count` the distinct keys of items
    in the streams of the jobs known to this Redis.
    """

    name = "stream"

    def __init__(
        self,
        url: str,
        *,
        prefix: str,
        maxlen: int = 0,
        groups: Sequence[str] = (),
        client: AsyncRedis | None = None,
        options: StoreOptions | None = None,
        stats: StatsCollector | None = None,
    ) -> None:
        super().__init__(options, stats=stats)
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError(f"CRAWLFLEET_REDIS_URL must be a redis:// URL, got {url!r}")
        if not prefix or any(c in prefix for c in "{}: "):
            raise ConfigError(
                f"CRAWLFLEET_KEY_PREFIX must be non-empty without braces, colons or spaces, "
                f"got {prefix!r}"
            )
        if maxlen < 0:
            raise ConfigError(f"CRAWLFLEET_ITEMS_STREAM_MAXLEN must be >= 0, got {maxlen}")
        self.url = url
        self.prefix = prefix
        self.maxlen = maxlen
        #: consumer groups created with each job's stream (each gets every entry)
        self.groups = tuple(dict.fromkeys(groups))
        self._async_client = client
        self._loop: asyncio.AbstractEventLoop | None = None
        self._blocking: redis.Redis | None = None
        self._blocking_lock = threading.Lock()
        self._registered: set[str] = set()
        digest = hashlib.sha1(
            f"{_without_password(url)}|{prefix}".encode(), usedforsecurity=False
        ).hexdigest()[:12]
        self._spill_id = f"stream-{prefix}-{digest}"

    @property
    def target(self) -> str:
        """``redis stream <url without password> prefix <prefix>``."""
        return f"redis stream {_without_password(self.url)} prefix {self.prefix}"

    def identity(self) -> dict[str, str]:
        """The Redis database (never a password) and key prefix of the streams."""
        return {"store": "stream", "redis": redis_identity(self.url), "prefix": self.prefix}

    @property
    def spill_id(self) -> str:
        """Spill-file id: the prefix and a hash of URL and prefix."""
        return self._spill_id

    def keys(self, job: str) -> JobKeys:
        """The keys of *job* (its name checked: it becomes a hash tag)."""
        return JobKeys.of(self.prefix, validate_job_name(job))

    def open(self) -> None:
        """Start writing; with a shared client, remember the loop it runs on."""
        if self._async_client is not None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                raise RuntimeError(
                    "RedisStreamSink with a shared client must be opened on the client's "
                    "running event loop (Scrapy's asyncio reactor)"
                ) from None
        super().open()

    # --- worker-thread operations ----------------------------------------------------

    def setup(self) -> None:
        """Check that Redis answers (PING); streams are created by their first entry."""
        if self._async_client is None:
            self._client().ping()
        else:
            self._run_on_loop(self._async_ping)

    async def _async_ping(self) -> None:
        assert self._async_client is not None
        await self._async_client.ping()

    def _client(self) -> redis.Redis:
        with self._blocking_lock:
            if self._blocking is None:
                # one quick retry for a pooled connection that a Redis restart cut; the
                # sink's own back-off handles longer outages
                self._blocking = redis.Redis.from_url(
                    self.url,
                    socket_connect_timeout=5,
                    socket_timeout=60,
                    retry=Retry(NoBackoff(), 1),
                )
            return self._blocking

    def _queue(self, pipe: Any, records: Sequence[Record]) -> set[str]:
        """Add the commands writing *records* to *pipe* (sync or asyncio pipeline);
        return the jobs registered by them."""
        jobs: set[str] = set()
        maxlen = self.maxlen or None
        for record in records:
            stream = self.keys(record.job).items
            if record.job not in self._registered and record.job not in jobs:
                pipe.sadd(jobs_key(self.prefix), record.job)
                for group in self.groups:  # BUSYGROUP when it exists: fine
                    pipe.xgroup_create(stream, group, id="0", mkstream=True)
                jobs.add(record.job)
            pipe.xadd(stream, encode_record(record), maxlen=maxlen, approximate=True)
        return jobs

    async def _write_async(self, client: AsyncRedis, records: Sequence[Record]) -> set[str]:
        pipe = client.pipeline(transaction=False)
        jobs = self._queue(pipe, records)
        _raise_unexpected(await pipe.execute(raise_on_error=False))
        return jobs

    def write_batch(self, records: Sequence[StoredItem], marks: Sequence[ItemMark] = ()) -> None:
        """Append *records*, then *marks*, to their jobs' streams in one pipelined round
        trip."""
        entries: list[Record] = [*records, *marks]
        if self._async_client is None:
            pipe = self._client().pipeline(transaction=False)
            jobs = self._queue(pipe, entries)
            _raise_unexpected(pipe.execute(raise_on_error=False))
        else:
            client = self._async_client
            jobs = self._run_on_loop(lambda: self._write_async(client, entries))
        if jobs:  # a new set, not in place: get() and count() may read it meanwhile
            self._registered = self._registered | jobs

    def _run_on_loop(self, work: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        """Run the coroutine *work* makes on the shared client's loop; wait for it."""
        loop = self._loop
        if loop is None or loop.is_closed():
            raise _LoopUnavailable("the event loop of the shared Redis client is gone")
        coro = work()
        try:
            future = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError as exc:
            coro.close()
            raise _LoopUnavailable(f"cannot schedule on the event loop: {exc}") from None
        try:
            return future.result(_LOOP_WRITE_TIMEOUT_SECONDS)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise _LoopUnavailable(
                f"no answer within {_LOOP_WRITE_TIMEOUT_SECONDS:.0f} s on the event loop"
            ) from None
        except concurrent.futures.CancelledError:
            raise _LoopUnavailable("the write was cancelled (event loop stopping)") from None

    def is_transient(self, exc: BaseException) -> bool:
        """Redis unreachable, loading, full or failing over; a bad job name or a key of
        another type is not transient."""
        return is_transient_redis_error(exc)

    def teardown(self) -> None:
        """Close the sink's own client (the shared one belongs to the process)."""
        with self._blocking_lock:
            client, self._blocking = self._blocking, None
        if client is not None:
            client.close()

    # --- reads -----------------------------------------------------------------------

    def _jobs(self, client: redis.Redis) -> set[str]:
        known = {text(job) for job in client.smembers(jobs_key(self.prefix))}
        return known | self._registered

    def _entries(self, client: redis.Redis, job: str) -> Iterator[tuple[bytes, dict[bytes, bytes]]]:
        stream, start = self.keys(job).items, b"-"
        while True:
            chunk: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(  # type: ignore[assignment]
                stream, start, b"+", count=_SCAN_CHUNK
            )
            yield from chunk
            if len(chunk) < _SCAN_CHUNK:
                return
            start = b"(" + chunk[-1][0]

    def get(self, key: str) -> StoredItem | None:
        """The latest item entry with *key* in any job's stream, with the marks of *key*
        appended after it applied, or None. Blocking."""
        client = self._client()
        wanted = key.encode()
        first: bytes | None = None
        last: tuple[bytes, dict[bytes, bytes]] | None = None
        marks: list[tuple[bytes, dict[bytes, bytes]]] = []
        for job in sorted(self._jobs(client)):
            for entry_id, fields in self._entries(client, job):
                if fields.get(b"key") != wanted:
                    continue
                if is_mark_entry(fields):
                    marks.append((entry_id, fields))
                    continue
                if first is None or _id_tuple(entry_id) < _id_tuple(first):
                    first = entry_id
                if last is None or _id_tuple(entry_id) > _id_tuple(last[0]):
                    last = (entry_id, fields)
        if last is None or first is None:
            return None
        record = decode_entry(last[1])
        document, updated = record.document, last[0]
        for entry_id, fields in sorted(marks, key=lambda m: _id_tuple(m[0])):
            if _id_tuple(entry_id) > _id_tuple(last[0]):
                mark = decode_record(fields)
                assert isinstance(mark, ItemMark)
                document, updated = {**document, GONE_AT: mark.gone_at}, entry_id
        return StoredItem(
            record.key,
            record.job,
            record.item_type,
            record.url,
            document,
            created_at=entry_time(first),
            updated_at=entry_time(updated),
        )

    def count(self) -> int:
        """Distinct item keys in the streams of the jobs known to this Redis (marks left
        out). Blocking."""
        client = self._client()
        keys: set[bytes] = set()
        for job in self._jobs(client):
            keys.update(
                fields.get(b"key", b"")
                for _, fields in self._entries(client, job)
                if not is_mark_entry(fields)
            )
        keys.discard(b"")
        return len(keys)


def redis_identity(url: str) -> str:
    """Which Redis database *url* is, to compare with another process's (never a user
    or password): ``redis://host:port/db``, ``unix:///path?db=N``."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        db = parse_qs(parts.query).get("db", ["0"])[0]
        return f"unix://{parts.path}?db={db}"
    host = parts.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    db = parts.path.strip("/") or parse_qs(parts.query).get("db", ["0"])[0]
    return f"{parts.scheme}://{host}:{parts.port or 6379}/{db}"


def _id_tuple(entry_id: bytes) -> tuple[int, int]:
    millis, _, seq = entry_id.partition(b"-")
    return int(millis), int(seq or 0)


def _without_password(url: str) -> str:
    """*url* with the password of its user info replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}"


def _redis_config(settings: BaseSettings) -> RedisConfig:
    """The crawl's Redis settings, with defaults for those not set (no add-on)."""
    names = (
        "CRAWLFLEET_REDIS_URL",
        "CRAWLFLEET_DATA_DIR",
        "CRAWLFLEET_KEY_PREFIX",
        "CRAWLFLEET_REDIS_RETRY_MIN_SECONDS",
        "CRAWLFLEET_REDIS_RETRY_MAX_SECONDS",
    )
    return RedisConfig.from_settings(BaseSettings({n: raw_setting(settings, n) for n in names}))


class RedisStreamPipeline(StorePipeline):
    """Item pipeline appending every item to its job's Redis stream (the crawl's Redis:
    ``CRAWLFLEET_REDIS_URL`` or the embedded one), for ``crawlfleet items work``."""

    @classmethod
    def sink_from_crawler(cls, crawler: Crawler) -> RedisStreamSink:
        """Build the stream sink on the process's shared Redis client; a wrong setting or
        job name stops start-up."""
        settings = crawler.settings
        config = _redis_config(settings)
        job = get_str(settings, "CRAWLFLEET_JOB").strip()
        if not job and crawler.spider is not None:
            job = crawler.spider.name
        if job:
            try:
                validate_job_name(job)
            except ConfigError as exc:
                raise ConfigError(f"CRAWLFLEET_JOB (or the spider name): {exc}") from None
        sink = RedisStreamSink(
            resolve_url(config),
            prefix=config.key_prefix,
            maxlen=get_int(settings, "CRAWLFLEET_ITEMS_STREAM_MAXLEN", minimum=0),
            groups=item_groups(settings),
            client=shared_client(crawler, config),
            options=StoreOptions.from_settings(settings),
            stats=crawler.stats,
        )
        return sink


async def stream_status(client: AsyncRedis, keys: JobKeys) -> dict[str, Any]:
    """Length, first and last entry, dead letters, groups and their consumers of the
    item stream of *keys*' job (JSON-ready)."""
    status: dict[str, Any] = {
        "job": keys.job,
        "stream": keys.items,
        "length": int(await client.xlen(keys.items)),
        "dead_letters": int(await client.xlen(keys.items_dead)),
        "first_entry": None,
        "last_entry": None,
        "groups": [],
    }
    if not await client.exists(keys.items):
        return status
    info = await client.xinfo_stream(keys.items)
    for name in ("first", "last"):
        entry = info.get(f"{name}-entry")
        status[f"{name}_entry"] = text(entry[0]) if entry else None
    for group in await client.xinfo_groups(keys.items):
        name = text(group["name"])
        consumers = [
            {"name": text(c["name"]), "pending": int(c["pending"]), "idle_ms": int(c["idle"])}
            for c in await client.xinfo_consumers(keys.items, name)
        ]
        lag = group.get("lag")
        status["groups"].append(
            {
                "name": name,
                "pending": int(group["pending"]),
                "last_delivered": text(group["last-delivered-id"]),
                "lag": None if lag is None else int(lag),
                "consumers": consumers,
            }
        )
    return status
