"""The revisit state of a tracked page: a small dict in ``request.meta[REVISIT_META]``.

It travels with the request's payload through the frontier (msgpack-plain values,
short keys), so a tracked URL needs no second store. Kept from visit to visit:

- ``visits``: visits done; ``kept``: 1 once the frontier counts this request as tracked
  (its lease is kept for the next visit, counter ``tracked``);
- ``interval``: the interval chosen at the last visit (s); ``due``: when this visit was
  due; ``last``: when the page was last fetched (epoch s, whole: the state travels in
  every payload, where a float costs 9 bytes and such an int 5);
- ``etag``, ``lm``: the page's last ``ETag`` and ``Last-Modified``;
- ``fp``: the change fingerprint of what the spider last extracted (hex);
  ``first``: when the page was first fetched, ``changed``: when it last changed
  (epoch s), ``version``: how many versions were seen (1 after the first visit);
- ``gone``: the visits in a row that answered 404 or 410;
- ``keys``: the keys of the items stored of the page's last version (20-byte digests,
  at most :data:`KEYS_KEPT`; set by :mod:`crawlfleet.pipelines.gone` when an item
  store marks gone pages): the items marked ``gone_at`` when the page is found gone;
- ``cf``: a sitemap ``changefreq`` for the page ("hourly", ...), set by a spider.

Set during one visit and removed before the state is stored again (:func:`stored`):
``outcome`` (:data:`OUTCOMES`, or :data:`HANDED`), ``hint`` (the interval the page's
HTTP caching headers suggest, s), ``url`` (the URL the state was last sent with),
``cond`` (1: the conditional headers were added by crawlfleet), ``back`` (1: the page
answered 2xx after 404/410: a new version, whatever its fingerprint).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from scrapy import Request

from crawlfleet.meta import REVISIT_META

__all__ = [
    "CHANGED",
    "FAILED",
    "FETCHED",
    "GONE",
    "HANDED",
    "KEYS_KEPT",
    "NOT_MODIFIED",
    "OUTCOMES",
    "TRANSIENT",
    "UNCHANGED",
    "handed_on",
    "iso",
    "state_of",
    "stored",
]

#: The page changed (or was seen for the first time): its items go on, a new version.
CHANGED = "changed"
#: The page was fetched and its extraction is what it was: its items are dropped.
UNCHANGED = "unchanged"
#: The server said 304 Not Modified to a conditional request.
NOT_MODIFIED = "not_modified"
#: The page answered 404 or 410.
GONE = "gone"
#: The visit failed for another reason (after its retries): kept, same interval.
FAILED = "failed"
#: Fetched, not judged yet (the spider middleware makes it changed or unchanged; a
#: callback that raised leaves it so, and it counts as failed).
FETCHED = "fetched"
#: The outcome of a visit, as counted (stats ``revisit/<outcome>``).
OUTCOMES = (CHANGED, UNCHANGED, NOT_MODIFIED, GONE, FAILED)
#: The state went on with another request of the same page (a retry, a redirect): this
#: one is finished without being kept.
HANDED = "handed"
#: Keys of one visit, never stored.
TRANSIENT = ("outcome", "hint", "url", "cond", "back")
#: The most item keys kept in a page's state (``keys``): the items of a page beyond
#: these are not marked when it goes.
KEYS_KEPT = 16


def state_of(request: Request) -> dict[str, Any] | None:
    """The revisit state of *request* (the dict itself, to change in place), or None."""
    state = request.meta.get(REVISIT_META)
    return state if isinstance(state, dict) else None


def stored(state: dict[str, Any]) -> dict[str, Any]:
    """A copy of *state* as it is kept between visits (no key of one visit)."""
    return {k: v for k, v in state.items() if k not in TRANSIENT}


def handed_on(state: dict[str, Any]) -> dict[str, Any]:
    """The state for a new request of the same page (a retry, a redirect) that takes
    it over from the request whose *state* it is: a copy of the stored keys, not kept
    yet (the frontier counts it once it is); *state* is marked :data:`HANDED`."""
    copy = stored(state)
    copy.pop("kept", None)
    state["outcome"] = HANDED
    return copy


def iso(epoch: float) -> str:
    """*epoch* seconds as ISO 8601 in UTC, to the second (items' stamps, events)."""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")
