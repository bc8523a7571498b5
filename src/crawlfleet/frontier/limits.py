"""Per-site rate limits that hold across the whole cluster.

A limit reads ``"H/W"``: at most H requests per W seconds (``"2/1s"``, ``"30/1m"``,
``"1/5s"``, a bare number of seconds is allowed: ``"1/5"``); ``"none"`` lifts a limit.
It applies to a site pattern: an exact host (``shop.example.com``), a domain and its
sub-domains (``*.example.com``), or ``*`` for every other site. Limits come from the
``CRAWLFLEET_RATE_LIMITS`` setting and, overriding it, from the job's ``limits`` hash in
Redis (``crawlfleet limits set``), which nodes re-read with every heartbeat.

The lease script enforces a limit as a minimum interval between requests to the site,
on Redis's clock, shared by every node: W / H, widened by ``SPACING`` so that the small
delay between lease and fetch never lets two requests land closer than the limit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from crawlfleet.exceptions import ConfigError

__all__ = ["SPACING", "RateLimits", "parse_limit"]

#: Requests of a limited site are spaced this much wider than W / H (5%: the limit
#: holds in any sliding window despite delivery jitter; the budget is 95% used).
SPACING = 1.05

_LIMIT = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_UNLIMITED = ("", "none", "0", "off", "unlimited")


def parse_limit(spec: str, *, what: str = "rate limit") -> int:
    """Milliseconds between requests for *spec* ("2/1s"); 0 for no limit."""
    text = str(spec).strip().lower()
    if text in _UNLIMITED:
        return 0
    m = _LIMIT.match(text)
    if not m:
        raise ConfigError(
            f"{what} {spec!r} must look like '2/1s' (requests / seconds; units ms, s, m, "
            "h) or 'none'"
        )
    count, window = int(m.group(1)), float(m.group(2)) * _UNITS[m.group(3)]
    if count < 1 or window <= 0:
        raise ConfigError(f"{what} {spec!r} needs at least 1 request in a window above 0")
    return max(1, round(window * 1000 / count * SPACING))


def _check_pattern(pattern: str) -> str:
    p = pattern.strip().lower()
    body = p[2:] if p.startswith("*.") else p
    if p != "*" and (not body or any(c in body for c in "*/ :")):
        raise ConfigError(f"rate-limit site {pattern!r} must be a host, '*.domain' or '*'")
    return p


@dataclass
class RateLimits:
    """Site pattern -> interval (ms). Look-ups are cached per site."""

    intervals: dict[str, int]

    @classmethod
    def parse(cls, limits: Mapping[str, str], *, source: str) -> RateLimits:
        return cls(
            {
                _check_pattern(pattern): parse_limit(spec, what=f"{source}[{pattern!r}]")
                for pattern, spec in limits.items()
            }
        )

    def merged(self, override: RateLimits) -> RateLimits:
        return RateLimits({**self.intervals, **override.intervals})

    def interval_ms(self, site: str) -> int:
        """The interval for *site*: exact host, else the longest matching '*.domain',
        else '*', else 0 (no limit)."""
        exact = self.intervals.get(site)
        if exact is not None:
            return exact
        best, best_len = self.intervals.get("*", 0), -1
        for pattern, interval in self.intervals.items():
            if (
                pattern.startswith("*.")
                and (site == pattern[2:] or site.endswith(pattern[1:]))
                and len(pattern) > best_len
            ):
                best, best_len = interval, len(pattern)
        return best
