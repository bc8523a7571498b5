"""One Redis client per process: the configured URL, or the embedded default."""

from __future__ import annotations

import atexit
import logging
import re
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import BusyLoadingError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from scrapy import signals

from crawlfleet.redis.embedded import EmbeddedRedis
from crawlfleet.settings.config import RedisConfig

__all__ = ["REDIS_ERRORS", "make_client", "redact", "resolve_url", "shared_client"]

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
