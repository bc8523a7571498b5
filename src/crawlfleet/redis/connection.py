"""One Redis client per process: the configured URL, or the embedded default."""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
from typing import Any, cast

from redis import Redis as SyncRedis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import (
    BusyLoadingError,
    ClusterError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from scrapy import signals

from crawlfleet.exceptions import CommandFailed
from crawlfleet.parts import parts_of
from crawlfleet.redis.config import RedisConfig
from crawlfleet.redis.embedded import EmbeddedRedis
from crawlfleet.settings.config import redact_url

__all__ = [
    "CLUSTER_REPLIES",
    "CLUSTER_UNSUPPORTED",
    "REDIS_ERRORS",
    "REDIS_FAILURES",
    "is_cluster",
    "make_client",
    "redact",
    "refuse_cluster",
    "release_embedded",
    "resolve_url",
    "shared_client",
]

#: Every error a Redis call can raise: redis-py's own, and a Redis Cluster client's that
#: are not RedisError (no node of the cluster answers, slots not covered).
REDIS_FAILURES = (RedisError, RedisClusterException)

#: Errors that mean "Redis is not reachable right now" (wait and retry; nothing is lost):
#: on a Redis Cluster also a fail-over under way (a slot without a master for a moment).
REDIS_ERRORS = (
    RedisConnectionError,
    RedisTimeoutError,
    BusyLoadingError,
    OSError,
    ClusterError,
    TryAgainError,
    RedisClusterException,
)

logger = logging.getLogger(__name__)

_embedded: dict[str, EmbeddedRedis] = {}

#: Signals that end a process unless it handles them: a process that uses an embedded
#: Redis and leaves them to their default releases it first, then ends as they would
#: have ended it (SIGINT needs nothing: KeyboardInterrupt unwinds to atexit).
_ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_releasing = False


def resolve_url(config: RedisConfig) -> str:
    """The Redis URL to use: the configured one, or the embedded Redis's (started on
    first use, released when the process exits: normally, by an exception, Ctrl-C,
    SIGTERM or SIGHUP; the last process using it shuts it down)."""
    if config.url:
        return config.url.replace("valkey://", "redis://", 1)
    key = str(config.data_dir.resolve())
    handle = _embedded.get(key)
    if handle is None:
        handle = EmbeddedRedis(config.data_dir)
        handle.acquire()
        if not _embedded:
            atexit.register(release_embedded)
            _release_on_signals()
        _embedded[key] = handle
    return handle.url


def release_embedded() -> None:
    """Release every embedded Redis this process uses (the last user of one shuts it
    down). For a process about to end; more calls do nothing."""
    global _releasing
    _releasing = True
    try:
        while _embedded:
            _key, handle = _embedded.popitem()
            try:
                handle.release()
            except (OSError, RedisError) as exc:
                logger.warning("could not stop the embedded Redis in %s: %s", handle.dir, exc)
    finally:
        _releasing = False


def _release_on_signals() -> None:
    """Release the embedded Redis before an ending signal that this process leaves to its
    default action (one that a server or Scrapy handles ends the process normally, or
    restores this handler and raises the signal again, as uvicorn does)."""
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers; atexit still releases
    for signum in _ENDING_SIGNALS:
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _end_by_signal)


def _end_by_signal(signum: int, _frame: object) -> None:
    if _releasing:
        return  # the process is ending and releasing already: let it finish
    release_embedded()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)  # ends the process as the signal would have


def redact(text: str) -> str:
    """*text* with the password of every URL in it replaced by ``***``
    (``redis://:secret@host`` -> ``redis://:***@host``)."""
    return redact_url(text)


#: A Redis Cluster node reached through a plain client.
CLUSTER_UNSUPPORTED = (
    "a Redis Cluster node that did not answer when the command started: run it again "
    "once the cluster answers"
)
#: Replies that only a Redis Cluster node gives.
CLUSTER_REPLIES = ("MOVED ", "ASK ", "CLUSTERDOWN", "CROSSSLOT", "Hash slot not served")


async def refuse_cluster(client: Redis) -> None:
    """CommandFailed when *client* is a plain client of a Redis Cluster node (the cluster
    did not answer when the client was made): it would fail on the first key another
    master serves. (A Redis that refuses INFO is taken as standalone.)"""
    if isinstance(client, RedisCluster):
        return
    try:
        info = await client.info("cluster")
    except ResponseError:
        return
    if str(info.get("cluster_enabled", "0")) == "1":
        # not a wrong setting: the same command works once the cluster answers at start
        raise CommandFailed(f"CRAWLFLEET_REDIS_URL points at {CLUSTER_UNSUPPORTED}")


_cluster_urls: dict[str, bool] = {}


def is_cluster(url: str) -> bool:
    """Whether the Redis at *url* is a node of a Redis Cluster (asked once per URL and
    process, with INFO; a Redis that does not answer counts as standalone)."""
    known = _cluster_urls.get(url)
    if known is None:
        probe = SyncRedis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        try:
            known = str(probe.info("cluster").get("cluster_enabled", "0")) == "1"
        except (RedisError, OSError):
            return False  # not known yet: asked again next time
        finally:
            probe.close()
        _cluster_urls[url] = known
    return known


def make_client(url: str, **options: Any) -> Redis:
    """An asyncio client for *url*: binary replies, bounded timeouts. A node of a Redis
    Cluster gets a cluster client (it offers every command this project uses, routing
    each by its keys' slot)."""
    kwargs: dict[str, Any] = {
        "decode_responses": False,
        "socket_connect_timeout": 5,
        # a hung Redis (stopped, overloaded) is an error after this long, not a silent
        # node: the node says so and retries
        "socket_timeout": 5,
        "health_check_interval": 15,
    }
    kwargs.update(options)
    if is_cluster(url):
        return cast(Redis, RedisCluster.from_url(url, **kwargs))
    return Redis.from_url(url, **kwargs)


def shared_client(crawler: Any, config: RedisConfig) -> Redis:
    """The client of this crawler's process, created once and kept with the crawler's
    parts (``parts_of(crawler).redis``); it is closed when the engine stops (after every
    component has closed)."""
    parts = parts_of(crawler)
    client = parts.redis
    if client is None:
        client = parts.redis = make_client(resolve_url(config))

        async def close() -> None:
            await client.aclose()

        crawler.signals.connect(close, signal=signals.engine_stopped, weak=False)
    return client
