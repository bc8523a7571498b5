"""When a tracked page is visited again: the revisit policy, pure (no I/O, no clock).

A :class:`RevisitPolicy` holds rules by URL pattern, tried in order (the first that
matches wins), and a default rule for the URLs no rule matches. A rule's policy:

- ``fixed``: every visit is followed by the rule's interval;
- ``adaptive`` (as Nutch's AdaptiveFetchSchedule): a page that changed comes back after
  its last interval times ``faster``, one that did not (or answered 304) after its last
  interval times ``slower``, always within the rule's ``[min, max]``. Hints bound the
  result, still within ``[min, max]``: the interval an HTTP ``Cache-Control: max-age``
  or ``Expires`` gives the page from below (it will not change sooner, its server says),
  a sitemap ``changefreq`` from above (it changes about that often);
- ``off`` (or interval 0): the page is never revisited.

A visit that failed or answered 404/410 keeps the interval it had.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime

from crawlfleet.revisit.state import CHANGED, NOT_MODIFIED, UNCHANGED

__all__ = [
    "CHANGEFREQ_SECONDS",
    "POLICIES",
    "RevisitPolicy",
    "Rule",
    "cache_hint",
    "changefreq_seconds",
]

#: The policies a rule may have.
POLICIES = ("off", "fixed", "adaptive")

#: A sitemap's ``changefreq`` as an interval (s): "always" is the rule's min and
#: "never" its max (0 and infinity here, bounded by them).
CHANGEFREQ_SECONDS: Mapping[str, float] = {
    "always": 0.0,
    "hourly": 3600.0,
    "daily": 86400.0,
    "weekly": 7 * 86400.0,
    "monthly": 30 * 86400.0,
    "yearly": 365 * 86400.0,
    "never": float("inf"),
}

_MAX_AGE = re.compile(r"(?:^|[,\s])max-age\s*=\s*\"?(\d+)", re.IGNORECASE)
_NO_CACHE = re.compile(r"(?:^|[,\s])(?:no-cache|no-store)(?:$|[,\s=])", re.IGNORECASE)


@dataclass(frozen=True)
class Rule:
    """How the pages whose URL matches *pattern* (None: any) are revisited: *policy*
    (:data:`POLICIES`), first *interval*, bounds *min_seconds* and *max_seconds*."""

    pattern: re.Pattern[str] | None
    policy: str
    interval: float
    min_seconds: float
    max_seconds: float

    @property
    def tracks(self) -> bool:
        """Whether pages of this rule are revisited at all."""
        return self.policy != "off" and self.interval > 0


@dataclass(frozen=True)
class RevisitPolicy:
    """The revisit rules of a job (see the module docstring): *rules* in order, then
    *default*; the adaptive policy's factors *faster* (< 1) and *slower* (> 1); a page
    answering 404/410 *gone_after* visits in a row is dropped; *ignore_fields*: item
    fields left out of the change fingerprint; *conditional*: send If-None-Match /
    If-Modified-Since."""

    default: Rule
    rules: Sequence[Rule] = ()
    faster: float = 0.5
    slower: float = 1.5
    gone_after: int = 3
    ignore_fields: frozenset[str] = frozenset()
    conditional: bool = True

    def rule_for(self, url: str) -> Rule:
        """The first rule whose pattern matches *url* anywhere, else the default."""
        for rule in self.rules:
            if rule.pattern is not None and rule.pattern.search(url):
                return rule
        return self.default

    def tracks(self, url: str) -> bool:
        """Whether the page at *url* is revisited."""
        return self.rule_for(url).tracks

    def next_interval(
        self,
        rule: Rule,
        last: float | None,
        outcome: str,
        *,
        hint: float | None = None,
        changefreq: str | None = None,
    ) -> float:
        """The interval (s) before the next visit of a page of *rule* whose visit
        ended with *outcome* (crawlfleet.revisit.state), *last* the interval it had
        (None: its first visit), *hint* the interval its caching headers give
        (:func:`cache_hint`), *changefreq* its sitemap's."""
        if rule.policy == "fixed":
            return rule.interval
        lo, hi = rule.min_seconds, rule.max_seconds
        interval = rule.interval if last is None or last <= 0 else last
        if last is not None and last > 0:
            if outcome == CHANGED:
                interval *= self.faster
            elif outcome in (UNCHANGED, NOT_MODIFIED):
                interval *= self.slower
        if hint is not None and hint > 0:
            interval = max(interval, min(hint, hi))
        freq = changefreq_seconds(changefreq)
        if freq is not None:
            interval = min(interval, max(freq, lo))
        return min(hi, max(lo, interval))


def changefreq_seconds(value: object) -> float | None:
    """A sitemap ``changefreq`` (:data:`CHANGEFREQ_SECONDS`) in seconds; None for none
    or a word the sitemap protocol does not have."""
    if not isinstance(value, str):
        return None
    return CHANGEFREQ_SECONDS.get(value.strip().lower())


def cache_hint(
    cache_control: str | None, expires: str | None, date: str | None, now: float
) -> float | None:
    """How long (s) a response's caching headers say it stays fresh: ``Cache-Control:
    max-age`` (``no-cache`` / ``no-store``: None), else ``Expires`` minus ``Date`` (or
    *now*, epoch s). None for no hint (absent, unreadable, already stale)."""
    if cache_control:
        if _NO_CACHE.search(cache_control):
            return None
        found = _MAX_AGE.search(cache_control)
        if found:
            age = float(found.group(1))
            return age if age > 0 else None
    if not expires:
        return None
    at = _epoch(expires)
    if at is None:
        return None
    base = _epoch(date) if date else None
    fresh = at - (base if base is not None else now)
    return fresh if fresh > 0 else None


def _epoch(http_date: str) -> float | None:
    try:
        at = parsedate_to_datetime(http_date)
        if at.tzinfo is None:  # "-0000": UTC, says RFC 5322
            at = at.replace(tzinfo=UTC)
        return at.timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
