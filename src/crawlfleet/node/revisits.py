"""The node's half of continuous crawls: a finished request of a tracked page becomes a
:class:`~crawlfleet.frontier.records.Revisit` (or an
:class:`~crawlfleet.frontier.records.Untrack`) in the next commit, instead of an ack.

The scheduler builds a :class:`RevisitKeeper` unless ``CRAWLFLEET_REVISIT`` is "off"
(then nothing here is loaded, and nothing changes on a request's way). It is asked:

- when a request enters the node (:meth:`RevisitKeeper.entering`): a request carrying
  the revisit state of a page in flight here is either the same page again (a retry, a
  redirect, a request given back for a new slot), which takes the state over (the
  first request then ends without being kept: its lease is acknowledged, untracked if
  the frontier counted it), or another page whose meta was copied from it, which must
  not share its history (the state is left out of its meta);
- when a leased request is finished (:meth:`RevisitKeeper.finished`, from the ledger):
  its state's outcome (set by :mod:`crawlfleet.middlewares.revisit` and
  :mod:`crawlfleet.middlewares.changes`) says what becomes of its lease:

  - a page its policy tracks, fetched at least once (2xx or 304): kept, a ``Revisit``
    under the same rid, its payload encoded again with the updated state (per-try meta
    and crawlfleet's conditional headers left out), waiting its next interval
    (:meth:`~crawlfleet.revisit.policy.RevisitPolicy.next_interval`); ``new`` the first
    time; an event for the change stream when it changed (kind "new" for its first
    version, else "changed") or went (its first 404/410 in a row: "gone");
  - answering 404/410 ``CRAWLFLEET_REVISIT_GONE_AFTER`` visits in a row, refused
    before it was sent (robots.txt), no longer tracked by its rule, or handed on (see
    above) while the frontier counted it: an ``Untrack`` (event "untracked" when gone);
  - anything else (never fetched, not tracked): None, an ordinary ack.

Stats: ``revisit/<outcome>`` per visit, ``revisit/kept``, ``revisit/untracked``,
``revisit/late_seconds`` (the sum, over visits, of how late each was fetched after its
due time: a crawl that keeps up adds little) and ``revisit/unencodable``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from scrapy import Request

from crawlfleet.exceptions import SerializationError
from crawlfleet.frontier.records import Revisit, Untrack
from crawlfleet.meta import BAN_META, DELAY_META, NEW_IDENTITY_META, PROXY_WAITS_META, REVISIT_META
from crawlfleet.node.stats import NodeStats
from crawlfleet.revisit.policy import RevisitPolicy
from crawlfleet.revisit.state import (
    CHANGED,
    FAILED,
    FETCHED,
    GONE,
    HANDED,
    NOT_MODIFIED,
    UNCHANGED,
    handed_on,
    iso,
    state_of,
    stored,
)

__all__ = ["PER_TRY_META", "RevisitKeeper"]

logger = logging.getLogger(__name__)

#: Meta keys of one try of a request, left out of the payload kept for its next visit.
PER_TRY_META = (
    "retry_times",
    "download_latency",
    "download_slot",
    "redirect_urls",
    "redirect_times",
    "redirect_ttl",
    "redirect_reasons",
    DELAY_META,
    BAN_META,
    NEW_IDENTITY_META,
    PROXY_WAITS_META,
)
_CONDITIONAL = (b"If-None-Match", b"If-Modified-Since")
#: Outcomes of a page that answered (it exists, or existed).
_ANSWERED = (CHANGED, UNCHANGED, NOT_MODIFIED)


class RevisitKeeper:
    """See the module docstring. *encode*: a request's payload (SerializationError if it
    cannot go); *clock*: epoch seconds."""

    def __init__(
        self,
        policy: RevisitPolicy,
        encode: Callable[[Request], bytes],
        stats: NodeStats,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.policy = policy
        self.encode = encode
        self.stats = stats
        self.clock = clock

    def entering(self, request: Request) -> None:
        """*request* enters the node (the scheduler's enqueue): see the module
        docstring."""
        state = state_of(request)
        if state is None or "outcome" not in state or state["outcome"] == HANDED:
            return  # no state, or one that is not in flight here (a spider's own)
        sent_as = state.get("url")
        redirected = request.meta.get("redirect_urls")
        same = request.url == sent_as or (
            isinstance(redirected, list) and bool(redirected) and redirected[-1] == sent_as
        )
        if same:
            request.meta[REVISIT_META] = handed_on(state)
        else:
            del request.meta[REVISIT_META]  # another page: a history of its own

    def finished(self, request: Request, rid: str) -> Revisit | Untrack | None:
        """What becomes of the lease *rid* of *request*, finished: see the module
        docstring (None: an ordinary ack)."""
        state = state_of(request)
        if state is None:
            return None
        outcome = state.get("outcome")
        kept = bool(state.get("kept"))
        if outcome is None or outcome == HANDED:
            return Untrack(rid) if kept else None
        if outcome == FETCHED:
            outcome = FAILED  # its callback raised: not judged
        rule = self.policy.rule_for(request.url)
        if not rule.tracks or not (outcome in _ANSWERED or state.get("visits")):
            return self._untrack(rid, b"") if kept else None  # never fetched: not tracked
        self.stats.inc(f"revisit/{outcome}")
        now = self.clock()
        due, last = state.get("due"), state.get("last")
        if isinstance(due, int | float) and isinstance(last, int | float) and last > due:
            self.stats.inc("revisit/late_seconds", round(last - due))
        if outcome == GONE and int(state.get("gone") or 0) >= self.policy.gone_after:
            return self._untrack(rid, self._event(request, state, "untracked", now))
        event = b""
        if outcome == CHANGED:
            kind = "new" if state.get("version") == 1 else "changed"
            event = self._event(request, state, kind, now)
        elif outcome == GONE and state.get("gone") == 1:
            event = self._event(request, state, "gone", now)
        interval = self.policy.next_interval(
            rule,
            _number(state.get("interval")),
            outcome,
            hint=_number(state.get("hint")),
            changefreq=state.get("cf") if isinstance(state.get("cf"), str) else None,
        )
        state["visits"] = int(state.get("visits") or 0) + 1
        state["interval"] = interval
        state["due"] = round(now + interval)  # whole seconds: kept in the payload
        new = not kept
        state["kept"] = 1
        try:
            payload = self.encode(self._for_next_visit(request, state))
        except SerializationError as exc:
            logger.error("Revisit of %s dropped: %s", request.url, exc)
            self.stats.inc("revisit/unencodable")
            return self._untrack(rid, b"") if kept else None
        self.stats.inc("revisit/kept")
        return Revisit(rid, max(0, round(interval * 1000)), payload, new=new, event=event)

    def _untrack(self, rid: str, event: bytes) -> Untrack:
        self.stats.inc("revisit/untracked")
        return Untrack(rid, event)

    @staticmethod
    def _for_next_visit(request: Request, state: dict[str, Any]) -> Request:
        """*request* as it is kept for its next visit: its stored state, without the
        meta of this try and the conditional headers crawlfleet added."""
        meta = {k: v for k, v in request.meta.items() if k not in PER_TRY_META}
        meta[REVISIT_META] = stored(state)
        meta.pop("is_start_request", None)  # kept under its rid: no seen-filter again
        headers = request.headers
        if state.get("cond"):
            headers = headers.copy()
            for name in _CONDITIONAL:
                headers.pop(name, None)
        return request.replace(meta=meta, headers=headers)

    @staticmethod
    def _event(request: Request, state: dict[str, Any], kind: str, now: float) -> bytes:
        """A change-stream event: the page, its version, when it last changed, what
        happened (*kind*)."""
        changed = state.get("changed")
        event = {
            "url": request.url,
            "version": int(state.get("version") or 0),
            "changed_at": iso(changed) if isinstance(changed, int | float) else None,
            "kind": kind,
        }
        if kind in ("gone", "untracked"):
            event["at"] = iso(now)
        return json.dumps(event, separators=(",", ":")).encode()


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
