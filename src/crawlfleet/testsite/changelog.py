"""What a changing site (:mod:`crawlfleet.testsite.changing`) knows of its crawlers'
freshness: the ``changing`` section of ``/_stats``, and a typed reader of it.

A *change* is a version born after the counting started (site start or ``/_reset``);
the version a page has then is no change. Each change is, at any moment, exactly one of
*picked up* (fetched at least once, a 304 included), *missed* (replaced before anyone
fetched it) or *pending* (the page's current version, not fetched yet: the copy is
stale). The pick-up delay is the time from a change's birth to its first fetch.

A fetch is *unchanged* when the client already had that version: a 304, or a 200 whose
version is the one the same client last got. A client is the label in the
``X-Crawlfleet-Client`` header (none: one anonymous client), so every node of one crawl
should send the same label, or none. What each client last got is kept by a reset
(it is the crawler's knowledge, not a counter), so figures after a warm-up and a reset
are right.

Not thread-safe: call :class:`ChangeLog` from the server's event loop only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from crawlfleet.testsite.changing import CHANGE_CLASSES, INTERVALS, Schedule

__all__ = ["ChangeCounts", "ChangeLog", "ChangeStats", "Delays"]

#: Distinct client labels remembered; more are taken together as "(other)".
MAX_CLIENTS = 64
#: A change counts as on time if first fetched within this many change intervals.
ON_TIME_INTERVALS = 2.0


@dataclass(frozen=True)
class Delays:
    """Pick-up delays in real seconds (``None``: no change picked up)."""

    median: float | None = None
    p95: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, delays: list[float]) -> Delays:
        if not delays:
            return cls()
        ordered = sorted(delays)

        def rank(p: float) -> float:
            return round(ordered[max(0, math.ceil(p * len(ordered)) - 1)], 6)

        return cls(rank(0.5), rank(0.95), round(ordered[-1], 6))


@dataclass
class ChangeCounts:
    """The figures of a group of pages (a class, a validators group, or all).

    ``pages``; ``interval_seconds``: real seconds between changes (classes that change
    only, else ``None``); ``fetches`` (200s and 304s); ``unchanged_fetches`` (the client
    had that version, 304s included); ``not_modified`` (304s sent); ``changes`` (versions
    born since counting started) = ``picked_up`` + ``missed`` + ``pending``; ``due``:
    changes born at least two intervals ago, ``on_time``: those of them first fetched
    within two intervals, ``on_time_share`` = on_time / due (``None`` if none due);
    ``delay_seconds``: pick-up delays of the changes picked up.
    """

    pages: int = 0
    interval_seconds: float | None = None
    fetches: int = 0
    unchanged_fetches: int = 0
    not_modified: int = 0
    changes: int = 0
    picked_up: int = 0
    missed: int = 0
    pending: int = 0
    due: int = 0
    on_time: int = 0
    on_time_share: float | None = None
    delay_seconds: Delays = field(default_factory=Delays)
    _delays: list[float] = field(default_factory=list, init=False, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["_delays"]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChangeCounts:
        """The figures as ``/_stats`` gives them; ``ValueError`` if one is missing."""
        try:
            delays = data["delay_seconds"]
            interval, share = data["interval_seconds"], data["on_time_share"]
            counts = cls(
                interval_seconds=None if interval is None else float(interval),
                on_time_share=None if share is None else float(share),
                delay_seconds=Delays(**{k: delays[k] for k in ("median", "p95", "max")}),
            )
            for name in _COUNTS:
                setattr(counts, name, int(data[name]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not the figures of a changing site: {exc!r}") from None
        return counts

    def _finish(self) -> None:
        self.delay_seconds = Delays.of(self._delays)
        self.on_time_share = round(self.on_time / self.due, 6) if self.due else None


_COUNTS = (
    "pages",
    "fetches",
    "unchanged_fetches",
    "not_modified",
    "changes",
    "picked_up",
    "missed",
    "pending",
    "due",
    "on_time",
)


@dataclass(frozen=True)
class ChangeStats:
    """The ``changing`` section of ``/_stats``, typed: read it with :meth:`from_stats`.

    ``time_scale`` (site seconds per real second), ``site_seconds`` (the site clock
    now), ``counted_seconds`` (real seconds since counting started), ``clients`` (labels
    remembered), ``total``, ``classes`` (by class name, every class of
    :data:`~crawlfleet.testsite.changing.CHANGE_CLASSES`) and ``validators`` (``"etag"``:
    pages that send ``ETag``/``Last-Modified``, ``"none"``: the others).
    """

    time_scale: float
    site_seconds: float
    counted_seconds: float
    clients: int
    total: ChangeCounts
    classes: dict[str, ChangeCounts]
    validators: dict[str, ChangeCounts]

    @classmethod
    def from_stats(cls, stats: Mapping[str, Any]) -> ChangeStats:
        """From the whole ``/_stats`` document (or its ``changing`` section);
        ``ValueError`` if the site is not changing."""
        data = stats.get("changing", stats)
        if not isinstance(data, Mapping) or "total" not in data:
            raise ValueError("the site is not changing (start it with --changing)")
        return cls(
            time_scale=float(data["time_scale"]),
            site_seconds=float(data["site_seconds"]),
            counted_seconds=float(data["counted_seconds"]),
            clients=int(data["clients"]),
            total=ChangeCounts.from_json(data["total"]),
            classes={k: ChangeCounts.from_json(v) for k, v in data["classes"].items()},
            validators={k: ChangeCounts.from_json(v) for k, v in data["validators"].items()},
        )


class ChangeLog:
    """Counts a changing site's fetches and judges its crawlers' freshness.

    ``clock`` (real seconds, never decreasing) is read at construction: site time 0.
    """

    def __init__(self, schedule: Schedule, clock: Callable[[], float] = time.monotonic) -> None:
        self.schedule = schedule
        self._clock = clock
        self._start = clock()
        self._scale = schedule.changing.time_scale
        self._known: dict[tuple[str, int], int] = {}
        self._clients: set[str] = set()
        self.reset()

    def site_time(self) -> float:
        """The site clock now, in site seconds since the site started."""
        return (self._clock() - self._start) * self._scale

    def reset(self) -> None:
        """Start counting afresh from now (what clients last got is kept)."""
        self._since = self.site_time()
        pages = self.schedule.model.pages
        self._fetches = [0] * pages
        self._unchanged = [0] * pages
        self._not_modified = [0] * pages
        #: page -> version born since counting started -> site time of its first fetch
        self._first: list[dict[int, float]] = [{} for _ in range(pages)]

    def record(
        self, n: int, version: int, t: float, client: str | None, *, not_modified: bool = False
    ) -> None:
        """One fetch of page ``n`` answered with ``version`` at site time ``t``: a 304 if
        ``not_modified``; *client* as the ``X-Crawlfleet-Client`` header says."""
        label = self._client(client or "")
        self._fetches[n] += 1
        if not_modified or self._known.get((label, n)) == version:
            self._unchanged[n] += 1
        if not_modified:
            self._not_modified[n] += 1
        self._known[(label, n)] = version
        if self.schedule.birth(n, version) > self._since:
            self._first[n].setdefault(version, t)

    def _client(self, label: str) -> str:
        if label not in self._clients:
            if len(self._clients) >= MAX_CLIENTS:
                label = "(other)"
            self._clients.add(label)
        return label

    def snapshot(self) -> dict[str, Any]:
        """The ``changing`` section of ``/_stats`` (see :class:`ChangeStats`)."""
        schedule, now = self.schedule, self.site_time()
        total = ChangeCounts()
        classes: dict[str, ChangeCounts] = {
            name: ChangeCounts(interval_seconds=_real(INTERVALS.get(name), self._scale))
            for name in CHANGE_CLASSES
        }
        validators = {"etag": ChangeCounts(), "none": ChangeCounts()}
        for n in range(schedule.model.pages):
            group = "etag" if schedule.has_validators(n) else "none"
            page = self._page(n, now)
            for counts in (total, classes[schedule.page_class(n)], validators[group]):
                _add(counts, page)
        for counts in (total, *classes.values(), *validators.values()):
            counts._finish()
        return {
            "time_scale": self._scale,
            "site_seconds": round(now, 6),
            "counted_seconds": round((now - self._since) / self._scale, 6),
            "clients": len(self._clients),
            "total": total.as_dict(),
            "classes": {name: counts.as_dict() for name, counts in classes.items()},
            "validators": {name: counts.as_dict() for name, counts in validators.items()},
        }

    def _page(self, n: int, now: float) -> ChangeCounts:
        schedule, since, first = self.schedule, self._since, self._first[n]
        page = ChangeCounts(
            pages=1,
            fetches=self._fetches[n],
            unchanged_fetches=self._unchanged[n],
            not_modified=self._not_modified[n],
        )
        interval = schedule.interval(n)
        if interval is None:
            return page
        page.changes = schedule.births_between(n, since, now)
        current = schedule.version(n, now)
        page.pending = int(schedule.birth(n, current) > since and current not in first)
        page.picked_up = len(first)
        page.missed = page.changes - page.picked_up - page.pending
        window = ON_TIME_INTERVALS * interval
        page.due = schedule.births_between(n, since, now - window)
        for version, fetched in first.items():
            delay = fetched - schedule.birth(n, version)
            page._delays.append(delay / self._scale)
            if delay <= window and schedule.birth(n, version) <= now - window:
                page.on_time += 1
        return page


def _real(interval: float | None, scale: float) -> float | None:
    return None if interval is None else interval / scale


def _add(counts: ChangeCounts, page: ChangeCounts) -> None:
    for name in _COUNTS:
        setattr(counts, name, getattr(counts, name) + getattr(page, name))
    counts._delays += page._delays
