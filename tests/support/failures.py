"""Failed requests as nodes report them to the error registry, made up for the tests of
the registry and of its writer."""

from __future__ import annotations

from crawlfleet.state.errors import Failure
from crawlfleet.state.models import utcnow

__all__ = ["failure"]


def failure(n: int, reason: str = "http", job: str = "j", **extra: object) -> Failure:
    """Failure number *n* of *job* (its own fingerprint and URL, an HTTP 50x now);
    *extra* overrides any field."""
    values: dict[str, object] = {
        "job": job,
        "fingerprint": f"{n:040x}",
        "url": f"http://127.0.0.1:9/p/{n}",
        "site": "127.0.0.1",
        "reason": reason,
        "detail": f"HTTP 50{n % 10}",
        "node": "node-1",
        "at": utcnow(),
        "http_status": 500 + n % 10,
        "payload": b"\x01payload",
    }
    values.update(extra)
    return Failure(**values)  # type: ignore[arg-type]
