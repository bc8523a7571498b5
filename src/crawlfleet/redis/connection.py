"""One Redis client per process: the configured URL, or the embedded default."""

from __future__ import annotations

import atexit
import logging
import re
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import BusyLoadingError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from scrapy import signals

from crawlfleet.exceptions import ConfigError
from crawlfleet.redis.embedded import EmbeddedRedis
from crawlfleet.settings.config import RedisConfig

__all__ = [
    "CLUSTER_REPLIES",
    "CLUSTER_UNSUPPORTED",
    "REDIS_ERRORS",
    "make_client",
    "redact",
    "refuse_cluster",
    "resolve_url",
    "shared_client",
]

#: Errors that mean "Redis is not reachable right now" (wait and retry; nothing is lost).
REDIS_ERRORS = (RedisConnectionError, RedisTimeoutError, BusyLoadingError, OSError)

logger = logging.getLogger(__name__)

_embedded: dict[str, EmbeddedRedis] = {}


def resolve_url(config: RedisConfig) -> str:
    """The Redis URL to use: the configured one, or the embedded Redis's (started on
    first use, released when the process exits)."""
    if config.url:
        return config.url.replace("valkey://", "redis://", 1)
    key = str(config.data_dir.resolve())
    handle = _embedded.get(key)
    if handle is None:
        handle = EmbeddedRedis(config.data_dir)
        handle.acquire()
        _embedded[key] = handle
        atexit.register(handle.release)
    return handle.url


_SECRET_IN_URL = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s]+@", re.IGNORECASE)


def redact(text: str) -> str:
    """*text* with the password of every URL in it replaced by ``***``
    (``redis://:secret@host`` -> ``redis://:***@host``)."""
    return _SECRET_IN_URL.sub(r"\1***@", text)


#: What a Redis Cluster node is to crawlfleet today.
CLUSTER_UNSUPPORTED = (
    "a Redis Cluster node: crawlfleet runs on one Redis (standalone, or the primary of a "
    "replicated pair) and does not shard over a cluster yet"
)
#: Replies that only a Redis Cluster node gives.
CLUSTER_REPLIES = ("MOVED ", "ASK ", "CLUSTERDOWN", "CROSSSLOT", "Hash slot not served")


async def refuse_cluster(client: Redis) -> None:
    """ConfigError when *client*'s Redis is a node of a Redis Cluster: a job's frontier
    is not sharded over a cluster's masters yet, and a plain client there fails on the
    first key another master serves. (A Redis that refuses INFO is taken as standalone.)"""
    try:
        info = await client.info("cluster")
    except ResponseError:
        return
    if str(info.get("cluster_enabled", "0")) == "1":
        raise ConfigError(f"CRAWLFLEET_REDIS_URL points at {CLUSTER_UNSUPPORTED}")


def make_client(url: str, **options: Any) -> Redis:
    """An asyncio client for *url*: binary replies, bounded timeouts."""
    kwargs: dict[str, Any] = {
        "decode_responses": False,
        "socket_connect_timeout": 5,
        # a hung Redis (stopped, overloaded) is an error after this long, not a silent
        # node: the node says so and retries
        "socket_timeout": 5,
        "health_check_interval": 15,
    }
    kwargs.update(options)
    return Redis.from_url(url, **kwargs)


def shared_client(crawler: Any, config: RedisConfig) -> Redis:
    """The client of this crawler's process, created once and kept on the crawler; it is
    closed when the engine stops (after every component has closed)."""
    client: Redis | None = getattr(crawler, "_crawlfleet_redis", None)
    if client is None:
        client = make_client(resolve_url(config))
        crawler._crawlfleet_redis = client

        async def close() -> None:
            await client.aclose()

        crawler.signals.connect(close, signal=signals.engine_stopped, weak=False)
    return client
