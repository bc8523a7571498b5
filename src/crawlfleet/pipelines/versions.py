"""A page's versions continued by the store that holds its items.

A continuous crawl stamps the items of each new version of a page with ``version``,
``first_seen`` and ``changed_at`` (:mod:`crawlfleet.middlewares.changes`), counted in
the page's revisit state, which lives in the frontier. When the frontier is lost (Redis
restarted empty, a job rebuilt from its seeds), every page comes back as version 1 seen
for the first time, though the store still holds each item's last version. A store that
reads the item it holds under the same key before it writes (the SQL store) continues
its history instead, with :func:`continued`:

- the same fields as stored (the stamps, ``gone_at`` and the fields that make no new
  version, ``CRAWLFLEET_REVISIT_IGNORE_FIELDS``, aside): the same version; the stored
  stamps are kept (nothing changed; a write again is idempotent);
- other fields, or a page back after it was gone: a version after the stored one
  (``max(new, stored + 1)``), ``first_seen`` the earlier of the two.

Items without the three stamps, and every item of a crawl that does not revisit, are
written as they come (an item's own field named ``version`` is its own).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from crawlfleet.pipelines.sinks import GONE_AT
from crawlfleet.revisit.fingerprint import STAMPS

__all__ = ["continued", "is_stamped"]

_NOT_CONTENT = frozenset((*STAMPS, GONE_AT))


def _content(document: dict[str, Any], ignored: Collection[str]) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k not in _NOT_CONTENT and k not in ignored}


def _version(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def is_stamped(document: dict[str, Any]) -> bool:
    """Whether *document* carries a version's stamps (all three: a field of the item's
    own named ``version`` is no stamp)."""
    return all(k in document for k in STAMPS) and _version(document["version"]) is not None


def continued(
    new: dict[str, Any], stored: dict[str, Any] | None, ignored: Collection[str] = ()
) -> dict[str, Any]:
    """*new* (a document about to be written) with its stamps continued from *stored*
    (the document held under its key, or None), as the module docstring says; *ignored*:
    fields whose change makes no new version."""
    if stored is None or not is_stamped(new) or not is_stamped(stored):
        return new
    version, kept = new["version"], stored["version"]
    if GONE_AT not in stored and _content(new, ignored) == _content(stored, ignored):
        return {**new, **{k: stored[k] for k in STAMPS if k in stored}}
    out = {**new, "version": max(version, kept + 1)}
    first, was = new.get("first_seen"), stored.get("first_seen")
    if isinstance(was, str) and (not isinstance(first, str) or was < first):
        out["first_seen"] = was  # ISO 8601 in UTC: the text orders as the time
    return out
