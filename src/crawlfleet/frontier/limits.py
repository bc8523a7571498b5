"""Per-site rate limits that hold across the whole cluster.

A limit reads ``"H/W"``: at most H requests per W seconds (``"2/1s"``, ``"30/1m"``,
``"1/5s"``, a bare number of seconds is allowed: ``"1/5"``); ``"none"`` lifts a limit.
It applies to a site pattern: an exact host (``shop.example.com``), a domain and its
sub-domains (``*.example.com``), or ``*`` for every other site.

A site's budget is the fleet's: every node of every job that crawls the site draws on
one schedule (see :class:`Budgets`). Its limit comes from the ``CRAWLFLEET_RATE_LIMITS``
setting and, overriding it, from the fleet's run-time limits in Redis (``crawlfleet
limits set --fleet``). A job given its own limit for a site (``crawlfleet limits set
JOB``) crawls that site on a budget of its own instead. Nodes re-read both with every
heartbeat.

The lease script enforces a limit as a schedule of send times, on Redis's clock, shared
by every node: a lease grants each request of a limited site its own slot, W / H after
the budget's previous one, widened by ``SPACING``. A node sends each request at its
slot (woken by a timer) and gives back, unsent, a request it could not send within
:attr:`Limit.late_us` of its slot: then no window of W ever holds more than H requests,
however late the other sends were (H + 1 slots span W * SPACING, more than W plus any
allowed lateness).

Times are in microseconds, so limits up to a million requests per second keep their
precision (a 10.5 ms spacing is not rounded to 10 ms).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from crawlfleet.exceptions import ConfigError

__all__ = [
    "DEFAULT_MARGIN",
    "LATE_SHARE",
    "SENT_SHARE",
    "SPACING",
    "Budgets",
    "Limit",
    "Pace",
    "RateLimits",
    "delay_limit",
    "parse_limit",
]

#: Slots of a limited site are spaced this much wider than W / H by default
#: (CRAWLFLEET_RATE_LIMIT_MARGIN): the margin that absorbs late sends, so the limit
#: holds in any sliding window; the budget is used up to 1 / SPACING (97.6 %).
DEFAULT_MARGIN = 0.025
SPACING = 1 + DEFAULT_MARGIN
#: Share of that margin (SPACING - 1 times the window) a node may send late; the rest
#: covers the way to the site (a node that cannot send in time gives the request back).
LATE_SHARE = 0.3
#: Share of the margin by which a request must have passed the node's downloader
#: middlewares (robots.txt, a full download slot can hold it there; see
#: crawlfleet.middlewares.sendtime); the rest covers the wire.
SENT_SHARE = 0.7

_LIMIT = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_UNLIMITED = ("", "none", "0", "off", "unlimited")


@dataclass(frozen=True)
class Limit:
    """At most *count* requests in any window of *window_us* microseconds; slots are
    spaced W / H widened by *margin* (a share of the window kept free for late sends)."""

    count: int
    window_us: int
    margin: float = DEFAULT_MARGIN

    @property
    def interval_us(self) -> int:
        """The spacing of the site's slots (µs): W / H widened by the margin."""
        return max(1, round(self.window_us / self.count * (1 + self.margin)))

    @property
    def late_us(self) -> int:
        """How late after its slot a request may still be sent (µs)."""
        return int(self.window_us * self.margin * LATE_SHARE)

    @property
    def per_second(self) -> float:
        """The limit in requests per second."""
        return self.count * 1_000_000 / self.window_us


def parse_limit(
    spec: str, *, what: str = "rate limit", margin: float = DEFAULT_MARGIN
) -> Limit | None:
    """The :class:`Limit` that *spec* ("2/1s") describes; None for no limit."""
    text = str(spec).strip().lower()
    if text in _UNLIMITED:
        return None
    m = _LIMIT.match(text)
    if not m:
        raise ConfigError(
            f"{what} {spec!r} must look like '2/1s' (requests / seconds; units ms, s, m, "
            "h) or 'none'"
        )
    count, window = int(m.group(1)), float(m.group(2)) * _UNITS[m.group(3)]
    if count < 1 or window <= 0:
        raise ConfigError(f"{what} {spec!r} needs at least 1 request in a window above 0")
    window_us = round(window * 1_000_000)
    if window_us < count:
        raise ConfigError(f"{what} {spec!r} is more than one request per microsecond")
    return Limit(count, window_us, margin)


def delay_limit(seconds: float, *, margin: float = DEFAULT_MARGIN) -> Limit | None:
    """A per-request delay (Scrapy's ``DOWNLOAD_DELAY``) as a limit: one request per
    *seconds*, to the microsecond; None for a delay of 0 (or below a microsecond)."""
    window_us = round(seconds * 1_000_000) if seconds > 0 else 0
    return Limit(1, window_us, margin) if window_us >= 1 else None


def _check_pattern(pattern: str) -> str:
    p = pattern.strip().lower()
    body = p[2:] if p.startswith("*.") else p
    if p != "*" and (not body or any(c in body for c in "*/ :")):
        raise ConfigError(f"rate-limit site {pattern!r} must be a host, '*.domain' or '*'")
    return p


@dataclass
class RateLimits:
    """Site pattern -> limit (None: explicitly unlimited). Look-ups match the most
    specific pattern."""

    limits: dict[str, Limit | None]

    @classmethod
    def parse(
        cls, limits: Mapping[str, str], *, source: str, margin: float = DEFAULT_MARGIN
    ) -> RateLimits:
        return cls(
            {
                _check_pattern(pattern): parse_limit(
                    spec, what=f"{source}[{pattern!r}]", margin=margin
                )
                for pattern, spec in limits.items()
            }
        )

    @classmethod
    def lenient(
        cls,
        limits: Mapping[str, str],
        *,
        margin: float = DEFAULT_MARGIN,
        skipped: Callable[[str, str, ConfigError], None] | None = None,
    ) -> RateLimits:
        """The limits of *limits* that parse (run-time ones, written by anyone); each
        bad one is passed to *skipped* and left out."""
        valid: dict[str, str] = {}
        for pattern, spec in limits.items():
            try:
                cls.parse({pattern: spec}, source="limits")
            except ConfigError as exc:
                if skipped is not None:
                    skipped(pattern, spec, exc)
                continue
            valid[pattern] = spec
        return cls.parse(valid, source="limits", margin=margin)

    def merged(self, override: RateLimits) -> RateLimits:
        return RateLimits({**self.limits, **override.limits})

    def filled(self, defaults: Mapping[str, Limit]) -> RateLimits:
        """These limits, plus each pattern of *defaults* that they do not name."""
        return RateLimits({**defaults, **self.limits})

    def pattern(self, site: str) -> str | None:
        """The pattern that decides *site*'s limit: exact host, else the longest
        matching '*.domain', else '*'; None when no pattern matches."""
        if site in self.limits:
            return site
        best: str | None = "*" if "*" in self.limits else None
        for pattern in self.limits:
            if (
                pattern.startswith("*.")
                and (site == pattern[2:] or site.endswith(pattern[1:]))
                and (best is None or best == "*" or len(pattern) > len(best))
            ):
                best = pattern
        return best

    def limit(self, site: str) -> Limit | None:
        """The limit of *site* (see :meth:`pattern`); None: no limit."""
        pattern = self.pattern(site)
        return None if pattern is None else self.limits[pattern]

    def interval_us(self, site: str) -> int:
        """The spacing of *site*'s slots (µs; 0: no limit)."""
        limit = self.limit(site)
        return 0 if limit is None else limit.interval_us

    def late_us(self, site: str) -> int:
        """How late after its slot a request of *site* may be sent (µs; 0: no limit)."""
        limit = self.limit(site)
        return 0 if limit is None else limit.late_us


@dataclass(frozen=True)
class Pace:
    """How the lease script paces one site for this node: its slots' spacing (µs; 0:
    no limit), how late a slot may be sent (µs) and the budget (pace field) it draws on."""

    interval_us: int
    late_us: int
    budget: str


@dataclass
class Budgets:
    """Which budget each site of one job's node draws on, at which limit.

    *shared*: the limits every job shares (the node's ``CRAWLFLEET_RATE_LIMITS`` with the
    fleet's run-time limits over them); their budget is named by the site and the node's
    *scope* (``|type=...``, ``|ip=...``), so every job's nodes in that scope share it.
    *own*: the job's own run-time limits; a site one of them matches is paced on a
    budget of this job alone (``|job=<job>`` added to its name)."""

    shared: RateLimits
    own: RateLimits
    scope: str = ""
    job: str = ""

    def _find(self, site: str) -> tuple[Limit | None, bool]:
        """(the limit *site* is crawled at by this job, whether it is the job's own)."""
        pattern = self.own.pattern(site)
        if pattern is not None:
            return self.own.limits[pattern], True
        return self.shared.limit(site), False

    def limit(self, site: str) -> Limit | None:
        """The limit *site* is crawled at by this job (None: no limit)."""
        return self._find(site)[0]

    def interval_us(self, site: str) -> int:
        """The spacing of *site*'s slots (µs; 0: no limit)."""
        limit = self.limit(site)
        return 0 if limit is None else limit.interval_us

    def pace(self, site: str) -> Pace:
        """The pace of *site* for this node."""
        limit, own = self._find(site)
        budget = f"{site}{self.scope}|job={self.job}" if own else site + self.scope
        if limit is None:
            return Pace(0, 0, budget)
        return Pace(limit.interval_us, limit.late_us, budget)
