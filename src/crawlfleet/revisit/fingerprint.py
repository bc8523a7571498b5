"""The change fingerprint of a page: of what its spider extracts, not of its bytes.

Of its items' fields (every item of the page, in order, without the *ignored* fields
and the stamps crawlfleet adds, :data:`STAMPS`), or, for a page without items (a
listing), of the URLs of the requests it yields (as a set: their order is noise). Two
visits with the same fingerprint found the same thing: the page did not change.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any

__all__ = ["STAMPS", "change_fingerprint"]

#: The fields crawlfleet stamps on items of tracked pages (never part of a fingerprint).
STAMPS = ("first_seen", "changed_at", "version")


def change_fingerprint(
    items: Iterable[Mapping[str, Any]], urls: Iterable[str], ignored: Collection[str] = ()
) -> str:
    """The hex fingerprint of a page that yielded *items* (their fields) and requests
    for *urls*; fields named in *ignored* are left out."""
    left_out = set(ignored).union(STAMPS)
    fields = [{k: v for k, v in item.items() if k not in left_out} for item in items]
    basis: Any = ["items", fields] if fields else ["urls", sorted(set(urls))]
    text = json.dumps(basis, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest()
