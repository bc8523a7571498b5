"""MongoDB item store (pymongo).

One collection (``CRAWLFLEET_MONGODB_COLLECTION``) with one document per item key::

    _id          the item key (``_key``, see ``pipelines/key.py``)
    job          the job that last wrote the item
    item_type    the item's type
    url          the page the item came from, or null
    document     the item's public fields (an embedded document)
    created_at   when the key was first written (UTC)
    updated_at   when it was last written (UTC)

Writes are upserts by key (``$set`` everything but ``created_at``, ``$setOnInsert``
that), sent as one unordered ``bulk_write`` of up to ``CRAWLFLEET_STORE_BATCH_ITEMS``
on the store's worker thread; see :mod:`crawlfleet.pipelines.buffered` for buffering,
retries and back-pressure. An index on ``(job, updated_at)`` is created when missing.
The marks of a batch (:class:`~crawlfleet.pipelines.sinks.ItemMark`) follow its upserts
in the same ``bulk_write`` (ordered then, so that a mark follows the item it marks):
``$set`` of ``document.gone_at`` and ``updated_at``, no upsert (a key that is not
stored matches nothing).

``CRAWLFLEET_MONGODB_URL`` selects the server (``mongodb://`` or ``mongodb+srv://``);
the database is the one the URL names (``mongodb://host/<database>``), else
``CRAWLFLEET_MONGODB_DATABASE``. Field names MongoDB refuses in updates (a leading
``$``) make their item refused: logged and set aside like any refused record.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from pymongo import ASCENDING, MongoClient, UpdateOne
from pymongo import errors as mongo_errors
from pymongo.collection import Collection
from pymongo.uri_parser import parse_uri
from scrapy.crawler import Crawler
from scrapy.settings import BaseSettings
from scrapy.statscollectors import StatsCollector

from crawlfleet.exceptions import ConfigError
from crawlfleet.pipelines.buffered import BufferedSink, StoreOptions
from crawlfleet.pipelines.sinks import GONE_AT, ItemMark, StoredItem
from crawlfleet.pipelines.store import StorePipeline
from crawlfleet.settings.access import get_str

__all__ = ["MongoSink", "MongoStorePipeline", "mongo_sink_from_settings"]

#: Server error codes that mean "busy, failing over or shutting down": retry the batch.
_TRANSIENT_CODES = frozenset(
    {
        6,  # HostUnreachable
        7,  # HostNotFound
        64,  # WriteConcernFailed
        89,  # NetworkTimeout
        91,  # ShutdownInProgress
        189,  # PrimarySteppedDown
        262,  # ExceededTimeLimit
        9001,  # SocketException
        10107,  # NotWritablePrimary
        11000,  # DuplicateKey: two concurrent upserts of one new key; the retry updates
        11600,  # InterruptedAtShutdown
        11602,  # InterruptedDueToReplStateChange
        13435,  # NotPrimaryNoSecondaryOk
        13436,  # NotPrimaryOrSecondary
    }
)
_DATABASE_RE = re.compile(r'^[^/\\. "$*<>:|?\x00]{1,63}$')
_COLLECTION_RE = re.compile(r"^(?!system\.)[^$\x00]{1,120}$")


def _utcnow() -> dt.datetime:
    # MongoDB keeps milliseconds: truncate so that what is read back equals what was set
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def _without_password(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    userinfo, at, hosts = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:***@{hosts}"


def _url_database(url: str) -> str | None:
    """The database named in *url*, or None; raises ConfigError for a bad URL."""
    if not url.startswith(("mongodb://", "mongodb+srv://")):
        raise ConfigError(
            f"CRAWLFLEET_MONGODB_URL must start with mongodb:// or mongodb+srv://, "
            f"got {_without_password(url)!r}"
        )
    if url.startswith("mongodb+srv://"):
        # parse_uri would resolve the SRV record (network): read the path only
        path = urlsplit(url).path.lstrip("/")
        return path or None
    try:
        parsed = parse_uri(url)
    except (mongo_errors.InvalidURI, mongo_errors.ConfigurationError, ValueError) as exc:
        raise ConfigError(f"CRAWLFLEET_MONGODB_URL {_without_password(url)!r}: {exc}") from None
    database = parsed.get("database")
    return database if isinstance(database, str) and database else None


class MongoSink(BufferedSink):
    """Item sink writing to one MongoDB collection (see the module docstring).

    The database is the one *url* names, else *database*. *client_options* are extra
    ``MongoClient`` arguments over the defaults (5 s server selection and connect
    timeouts, 60 s socket timeout).
    """

    name = "mongodb"

    def __init__(
        self,
        url: str,
        *,
        database: str = "crawlfleet",
        collection: str = "crawlfleet_items",
        options: StoreOptions | None = None,
        stats: StatsCollector | None = None,
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(options, stats=stats)
        self.url = url
        self.database = _url_database(url) or database
        if not _DATABASE_RE.match(self.database):
            raise ConfigError(
                f"CRAWLFLEET_MONGODB_DATABASE must be 1-63 characters without "
                f'/\\. "$*<>:|?, got {self.database!r}'
            )
        if not _COLLECTION_RE.match(collection):
            raise ConfigError(
                f"CRAWLFLEET_MONGODB_COLLECTION must be 1-120 characters without $ and not "
                f"start with 'system.', got {collection!r}"
            )
        self.collection_name = collection
        self.client_options: dict[str, Any] = {
            "serverSelectionTimeoutMS": 5000,
            "connectTimeoutMS": 5000,
            "socketTimeoutMS": 60000,
            "appname": "crawlfleet",
            **(client_options or {}),
        }
        self._client: MongoClient[dict[str, Any]] | None = None
        self._lock = threading.Lock()
        digest = hashlib.sha1(
            f"{_without_password(url)}|{self.database}|{collection}".encode(),
            usedforsecurity=False,
        ).hexdigest()[:12]
        self._spill_id = f"mongodb-{self.database}-{collection}-{digest}"

    @property
    def safe_url(self) -> str:
        """The server URL without its password (for logs)."""
        return _without_password(self.url)

    @property
    def target(self) -> str:
        """``mongodb <url without password> collection <database>.<collection>``."""
        return f"mongodb {self.safe_url} collection {self.database}.{self.collection_name}"

    def identity(self) -> dict[str, str]:
        """The server's hosts (no user, password or options), database and collection."""
        rest = self.url.partition("://")[2]
        hosts = rest.rpartition("@")[2].split("/", 1)[0].split("?", 1)[0]
        return {
            "store": "mongodb",
            "server": f"{self.url.partition('://')[0]}://{hosts}",
            "collection": f"{self.database}.{self.collection_name}",
        }

    @property
    def spill_id(self) -> str:
        """Spill-file id: database, collection and a hash of URL, database, collection."""
        return self._spill_id

    def _collection(self) -> Collection[dict[str, Any]]:
        with self._lock:
            if self._client is None:
                # created on first use: MongoClient starts monitor threads at once
                self._client = MongoClient(self.url, tz_aware=False, **self.client_options)
            return self._client[self.database][self.collection_name]

    # --- worker-thread operations ----------------------------------------------------

    def setup(self) -> None:
        """Check the server answers; create the (job, updated_at) index when missing."""
        collection = self._collection()
        collection.database.client.admin.command("ping")
        collection.create_index(
            [("job", ASCENDING), ("updated_at", ASCENDING)],
            name=f"ix_{self.collection_name}_job_updated",
        )

    def write_batch(self, records: Sequence[StoredItem], marks: Sequence[ItemMark] = ()) -> None:
        """Upsert *records*, then apply *marks*, with one bulk write (unordered when
        there is no mark)."""
        now = _utcnow()
        operations: list[UpdateOne] = [
            UpdateOne(
                {"_id": r.key},
                {
                    "$set": {
                        "job": r.job,
                        "item_type": r.item_type,
                        "url": r.url,
                        "document": r.document,
                        "updated_at": now,
                    },
                    "$setOnInsert": {"created_at": now},
                },
                upsert=True,
            )
            for r in records
        ]
        for m in marks:  # no upsert: a key that is not stored stays so
            marked = {f"document.{GONE_AT}": m.gone_at, "updated_at": now}
            operations.append(UpdateOne({"_id": m.key}, {"$set": marked}))
        if operations:
            self._collection().bulk_write(operations, ordered=not marks)

    def is_transient(self, exc: BaseException) -> bool:
        """Connection trouble, timeouts, failovers and write-concern failures are
        transient; documents the server refuses are not."""
        if isinstance(exc, mongo_errors.ConnectionFailure | mongo_errors.ExecutionTimeout):
            return True  # includes AutoReconnect, NetworkTimeout, ServerSelectionTimeoutError
        if isinstance(exc, mongo_errors.BulkWriteError):
            details = exc.details or {}
            codes = {error.get("code") for error in details.get("writeErrors", [])}
            return codes <= _TRANSIENT_CODES  # none (write concern only) or all transient
        if isinstance(exc, mongo_errors.PyMongoError):
            if exc.has_error_label("RetryableWriteError"):
                return True
            code = getattr(exc, "code", None)
            return code in _TRANSIENT_CODES
        return isinstance(exc, OSError)

    def teardown(self) -> None:
        """Close the client."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # --- reads -----------------------------------------------------------------------

    def get(self, key: str) -> StoredItem | None:
        """The stored record with *key*, or None."""
        found = self._collection().find_one({"_id": key})
        if found is None:
            return None
        return StoredItem(
            key=found["_id"],
            job=found["job"],
            item_type=found["item_type"],
            url=found.get("url"),
            document=found["document"],
            created_at=found.get("created_at"),
            updated_at=found.get("updated_at"),
        )

    def count(self) -> int:
        """Documents in the collection."""
        return int(self._collection().count_documents({}))

    def drop_collection(self) -> None:
        """Drop the collection (tests and tooling). Blocking."""
        self._collection().drop()


def mongo_sink_from_settings(
    settings: BaseSettings,
    *,
    url: str | None = None,
    stats: StatsCollector | None = None,
) -> MongoSink:
    """The MongoDB sink of *settings* (``CRAWLFLEET_MONGODB_*``, ``CRAWLFLEET_STORE_*``);
    *url* overrides ``CRAWLFLEET_MONGODB_URL``."""
    return MongoSink(
        url if url is not None else get_str(settings, "CRAWLFLEET_MONGODB_URL").strip(),
        database=get_str(settings, "CRAWLFLEET_MONGODB_DATABASE"),
        collection=get_str(settings, "CRAWLFLEET_MONGODB_COLLECTION"),
        options=StoreOptions.from_settings(settings),
        stats=stats,
    )


class MongoStorePipeline(StorePipeline):
    """Item pipeline storing into the MongoDB collection configured by
    CRAWLFLEET_MONGODB_URL, _DATABASE and _COLLECTION (see
    :class:`~crawlfleet.pipelines.store.StorePipeline`)."""

    @classmethod
    def sink_from_crawler(cls, crawler: Crawler) -> MongoSink:
        """Build the MongoDB sink from settings; a wrong URL or name stops start-up."""
        sink = mongo_sink_from_settings(crawler.settings, stats=crawler.stats)
        return sink
