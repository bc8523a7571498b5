"""Why a node's slots go back: the causes of its late sends, in its status and its log.

A slotted request that cannot go out on its slot goes back for a new one (counted in
``crawlfleet/scheduler/late``), for one of these causes, each counted apart
(``crawlfleet/scheduler/late/<cause>``):

- ``loop``: the engine took it too late: the node's event loop was blocked when its
  slot came due (parsing, or no core for the process);
- ``way``: it passed the downloader middlewares too late (robots.txt read first, or the
  event loop again);
- ``download_slot``: its host's download slot was full (an earlier request to a slow
  site still in flight under ``CONCURRENT_REQUESTS_PER_DOMAIN``);
- ``wire``: its connection was ready too late (one that opened slowly, or the loop).

The node's status carries them (``"late"``), with the longest its event loop was lately
seen blocked when a slot came due and how long lease replies take to come back. Every
:data:`WARN_EVERY_SECONDS` at most, when slots went back meanwhile, the log says so once:
how many, the cause most of them had, its figures and its remedy (the node's load against
its cores for a blocked loop, the download slot's concurrency for a slow site).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from crawlfleet.node.stats import NodeStats

__all__ = ["CAUSES", "WARN_EVERY_SECONDS", "Lateness"]

logger = logging.getLogger(__name__)

#: cause -> what it says in the log (formatted with the figures of :meth:`Lateness.figures`)
CAUSES = {
    "loop": (
        "this node's event loop was blocked up to {blocked_ms:.0f} ms when they came due "
        "(parsing, or too little CPU: load {load:.1f} on {cores} cores); give the node "
        "more CPU, or fewer pages at once (CONCURRENT_REQUESTS)"
    ),
    "way": (
        "they passed the downloader middlewares after their time (robots.txt read first, "
        "or the event loop blocked up to {blocked_ms:.0f} ms: load {load:.1f} on {cores} "
        "cores)"
    ),
    "download_slot": (
        "their site's download slot was full: an earlier request to it was still in "
        "flight (the site answers slower than its budget's interval; "
        "CONCURRENT_REQUESTS_PER_DOMAIN is {per_domain})"
    ),
    "wire": (
        "their connection was ready after their time (a new one opened slowly, or the "
        "event loop was blocked up to {blocked_ms:.0f} ms: load {load:.1f} on {cores} cores)"
    ),
}
#: The log says at most this often that slots went back.
WARN_EVERY_SECONDS = 60.0


class Lateness:
    """The node's late sends by cause (see the module docstring): a status provider
    (called with each heartbeat), which also logs them once a minute at most. *blocked*
    and *reply* give the longest the loop was lately seen blocked when a slot came due,
    and how long lease replies take to come back (s); *per_domain* is the download
    slot's concurrency."""

    def __init__(
        self,
        stats: NodeStats,
        *,
        blocked: Any,
        reply: Any,
        per_domain: int,
    ) -> None:
        self.stats = stats
        self._blocked = blocked
        self._reply = reply
        self._per_domain = per_domain
        #: the counts when the log last spoke (or the node started), and when
        self._told = dict.fromkeys(CAUSES, 0)
        self._told_at = time.monotonic()

    def counts(self) -> dict[str, int]:
        """Slots given back so far, by cause."""
        return {cause: self.stats.get(f"crawlfleet/scheduler/late/{cause}") for cause in CAUSES}

    def figures(self) -> dict[str, Any]:
        """What the causes' messages name."""
        return {
            "blocked_ms": self._blocked() * 1000,
            "reply_ms": self._reply() * 1000,
            "load": os.getloadavg()[0],
            "cores": os.cpu_count() or 1,
            "per_domain": self._per_domain,
        }

    def __call__(self) -> dict[str, Any]:
        counts = self.counts()
        figures = self.figures()
        self.say(counts, figures, time.monotonic())
        return {
            "late": {
                **counts,
                "loop_blocked_ms": round(figures["blocked_ms"], 1),
                "redis_reply_ms": round(figures["reply_ms"], 1),
            }
        }

    def say(self, counts: dict[str, int], figures: dict[str, Any], now: float) -> str | None:
        """Log the slots given back since the log last spoke, once
        :data:`WARN_EVERY_SECONDS` have passed since then: what it said (None: nothing)."""
        if now - self._told_at < WARN_EVERY_SECONDS:
            return None
        since = {cause: counts[cause] - self._told[cause] for cause in CAUSES}
        self._told, self._told_at = counts, now
        total = sum(since.values())
        if total <= 0:
            return None
        cause = max(since, key=lambda c: since[c])
        text = (
            f"{total} rate-limited requests missed their slots in the last "
            f"{WARN_EVERY_SECONDS:.0f} s and went back for new ones ({since[cause]} because "
            + CAUSES[cause].format(**figures)
            + ")"
        )
        logger.warning(text)
        return text
