"""A failure as a node records it for the error registry: plain data, no SQLAlchemy
(nodes build these on the event loop; :mod:`crawlfleet.state.errors` stores them)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = ["REASONS", "STATES", "Failure", "utcnow"]

#: Why a request failed: an HTTP error status, a download exception, an exception in
#: the spider's callback, in an item pipeline, an item refused (dropped), a ban.
REASONS = ("http", "exception", "parse", "item", "invalid", "ban")
STATES = ("open", "queued", "resolved")


@dataclass(frozen=True)
class Failure:
    """One failure as a node saw it (``at``: naive UTC)."""

    job: str
    fingerprint: str
    url: str
    site: str
    reason: str
    detail: str
    node: str
    at: datetime
    attempts: int = 1
    http_status: int | None = None
    unit: str | None = None
    stack: str | None = None
    payload: bytes | None = None


def utcnow() -> datetime:
    """Now as the state DB keeps times: UTC, naive."""
    return datetime.now(UTC).replace(tzinfo=None)
