"""Every exception crawlfleet raises on purpose."""

from __future__ import annotations

import logging

from scrapy.exceptions import DropItem

__all__ = [
    "CommandFailed",
    "ConfigError",
    "CrawlfleetError",
    "EmbeddedRedisError",
    "ItemNotDurable",
    "ItemStoreUnavailable",
    "MalformedEntry",
    "NotFound",
    "RedisUnreachable",
    "SerializationError",
    "UnknownJob",
]


class CrawlfleetError(Exception):
    """Base class of crawlfleet's own errors."""


class ConfigError(CrawlfleetError, ValueError):
    """A setting or a file is wrong; the message names it and says what is expected."""


class NotFound(ConfigError):
    """A command or API call named something that does not exist (a timer, an alert
    rule, a Scrapyd, a token, a campaign): 404 from the manager."""


class UnknownJob(NotFound):
    """A command or API call named a job that this Redis has never seen."""


class CommandFailed(CrawlfleetError):
    """An expected failure of a command or API call that is neither a setting nor Redis
    (a reset refused while nodes work); nothing was changed."""


class ItemStoreUnavailable(CrawlfleetError):
    """The manager cannot read an item store (no driver, no answer); the message says
    which store, without a password, and which setting says where it is: 503."""


class EmbeddedRedisError(CrawlfleetError):
    """The embedded Redis could not be started or joined."""


class RedisUnreachable(CrawlfleetError):
    """A node could not reach Redis within CRAWLFLEET_REDIS_START_TIMEOUT of its start
    (once it has, an outage is waited out); the message says where and why."""


class SerializationError(CrawlfleetError):
    """A request cannot be written in the wire format (e.g. an unserialisable meta value)."""


class MalformedEntry(CrawlfleetError):
    """An entry read from Redis cannot be decoded; it is moved aside, never executed."""


class ItemNotDurable(CrawlfleetError, DropItem):
    """An item store gave an item up before it was durable (the crawl is stopping while
    the store is unreachable). The request that produced the item is not acknowledged:
    it goes back to the frontier and is crawled again, so nothing is lost. Logged at
    DEBUG per item; the node logs one summary."""

    def __init__(self, message: str) -> None:
        super().__init__(message, log_level=logging.getLevelName(logging.DEBUG))
