"""Every exception crawlfleet raises on purpose."""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "CrawlfleetError",
    "EmbeddedRedisError",
    "MalformedEntry",
    "SerializationError",
]


class CrawlfleetError(Exception):
    """Base class of crawlfleet's own errors."""


class ConfigError(CrawlfleetError, ValueError):
    """A setting or a file is wrong; the message names it and says what is expected."""


class EmbeddedRedisError(CrawlfleetError):
    """The embedded Redis could not be started or joined."""


class SerializationError(CrawlfleetError):
    """A request cannot be written in the wire format (e.g. an unserialisable meta value)."""


class MalformedEntry(CrawlfleetError):
    """An entry read from Redis cannot be decoded; it is moved aside, never executed."""
