"""Progress of a node's long phases, as the operator reads it in the node's log: a
re-crawl round (:class:`~crawlfleet.node.recrawl.RecrawlPhase`) and a campaign
(:class:`~crawlfleet.node.campaign.CampaignFeeder`); ``crawlfleet errors recrawl
--wait`` says a re-crawl's lines on its stderr too.

The loops that run those phases already look every second; :class:`Cadence` tells them
when a line is due (every ``CRAWLFLEET_PROGRESS_SECONDS``, and at a phase change once
the phase has lasted that long; never in a shorter phase). The wording of every line is
here: :func:`recrawl_line`, :func:`campaign_line`. Each is also the node's ``phase`` in
its heartbeat status (``crawlfleet status``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scrapy.settings import BaseSettings

from crawlfleet.settings.access import get_float

__all__ = ["Cadence", "Line", "campaign_line", "duration", "progress_seconds", "recrawl_line"]

#: Sites named at most in a line (those with most requests waiting first).
SITES_SHOWN = 3


def progress_seconds(settings: BaseSettings) -> float:
    """``CRAWLFLEET_PROGRESS_SECONDS`` (ConfigError naming it when it is not a number
    >= 0)."""
    return get_float(settings, "CRAWLFLEET_PROGRESS_SECONDS", minimum=0)


@dataclass(frozen=True)
class Line:
    """A progress line: a %-style format and its arguments (logged as such);
    ``str(line)`` is its text."""

    fmt: str
    args: tuple[Any, ...] = ()

    def __str__(self) -> str:
        return self.fmt % self.args

    def log(self, logger: logging.Logger) -> None:
        logger.info(self.fmt, *self.args)


class Cadence:
    """When a phase's progress is due: every *seconds* from the phase's start
    (:meth:`start`) to its end (:meth:`stop`); a phase shorter than *seconds* says
    nothing. *seconds* 0: never."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        if seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {seconds}")
        self.seconds = seconds
        self.clock = clock
        self._began: float | None = None
        self._said = 0.0

    @property
    def running(self) -> bool:
        return self._began is not None

    def start(self) -> None:
        """A phase begins now (a phase running already begins anew)."""
        self._began = self._said = self.clock()

    def stop(self) -> None:
        self._began = None

    def elapsed(self) -> float:
        """Seconds since the phase began (0.0 when none runs)."""
        return 0.0 if self._began is None else self.clock() - self._began

    def long(self) -> bool:
        """The phase has lasted *seconds* or more (a phase change is worth a line)."""
        return self.seconds > 0 and self._began is not None and self.elapsed() >= self.seconds

    def due(self, *, change: bool = False) -> bool:
        """Whether to say a line now: *seconds* after the last one, or at once for a
        *change* of phase once the phase is long. Saying it is up to the caller."""
        if not self.long():
            return False
        now = self.clock()
        if change or now - self._said >= self.seconds:
            self._said = now
            return True
        return False


def duration(seconds: float) -> str:
    """``45s``, ``3m05s``, ``2h07m``."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _round(round_: int, rounds: int) -> str:
    return f"{round_}/{rounds}" if rounds else str(round_)


def _sites(backoff: Mapping[str, int]) -> str:
    """``site a.com backing off 8.0 s`` / ``sites a.com 8.0 s, b.org 2.0 s backing off``."""
    shown = list(backoff.items())[:SITES_SHOWN]
    if len(shown) == 1:
        site, ms = shown[0]
        return f"site {site} backing off {ms / 1000:.1f} s"
    listed = ", ".join(f"{site} {ms / 1000:.1f} s" for site, ms in shown)
    more = ", ..." if len(backoff) > len(shown) else ""
    return f"sites {listed}{more} backing off"


def recrawl_line(
    progress: Mapping[str, Any],
    rounds: int,
    backoff: Mapping[str, int] | None = None,
    *,
    seconds: float | None = None,
) -> Line:
    """A re-crawl round's progress from
    :func:`~crawlfleet.state.errors.recrawl_progress` (*rounds*: the most a failure is
    re-crawled, 0: unbounded); *backoff*: site -> back-off left (ms) of the sites its
    waiting failures are on; *seconds*: the round is over, after so long.

    ``Re-crawl round 2/3: 12 of 27 failures re-fetched, 9 fixed, 3 failed again, 15
    waiting (site example.com backing off 8.0 s)``"""
    fixed, again, waiting = progress["resolved"], progress["open"], progress["queued"]
    fmt = "Re-crawl round %s%s: %d of %d failure(s) re-fetched, %d fixed, %d failed again"
    args: tuple[Any, ...] = (
        _round(progress["round"], rounds),
        "" if seconds is None else f" done in {duration(seconds)}",
        fixed + again,
        progress["taken"],
        fixed,
        again,
    )
    if waiting:
        fmt += ", %d waiting"
        args += (waiting,)
        if backoff:
            fmt += " (%s)"
            args += (_sites(backoff),)
    return Line(fmt, args)


def campaign_line(status: Mapping[str, Any], requests_left: int | None = None) -> Line:
    """A campaign's progress from :func:`~crawlfleet.state.campaigns.campaign_status`;
    *requests_left*: queued or leased in its job's frontier (a unit is done when its
    first page is crawled: the pages it leads to may still be on their way).

    ``Campaign 'e2e' (running): 140/300 units done, 3 failed (47.7 %), 5 in flight,
    2.1 units/s, ETA 1m16s, 412 request(s) left in the job``"""
    units = status["units"]
    fmt = "Campaign %r (%s): %d/%d units done, %d failed (%.1f %%)"
    args: tuple[Any, ...] = (
        status["name"],
        status["state"],
        units["done"],
        status["total"],
        units["failed"],
        status["progress"] * 100,
    )
    busy = units["leased"] + units["fed"]
    if busy:
        fmt += ", %d in flight"
        args += (busy,)
    if units["pending"]:
        fmt += ", %d to feed again"
        args += (units["pending"],)
    per_minute = float(status["rate_per_min"])
    if per_minute >= 6:
        fmt += ", %.1f units/s"
        args += (per_minute / 60,)
    elif per_minute > 0:
        fmt += ", %.1f units/min"
        args += (per_minute,)
    if status["eta_seconds"] is not None:
        fmt += ", ETA %s"
        args += (duration(status["eta_seconds"]),)
    if requests_left:
        fmt += ", %d request(s) left in the job"
        args += (requests_left,)
    return Line(fmt, args)
