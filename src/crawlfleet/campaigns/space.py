"""A campaign's parameter space: dates (from..to by day, week or month), categories and
keywords, each optional, expanded lazily into task units. Unit ``i`` is computed from
``i`` alone (dates vary slowest, then categories, then keywords), so the space is never
materialised: a cursor over ``0 .. size()-1`` walks it, and extending the end date adds
units at the end without moving any that exist.

A unit gives start requests from a URL template: ``str.format`` fields ``{date}`` (a
``datetime.date``: ``{date:%Y/%m/%d}`` works; plain ``{date}`` is ISO), ``{category}``,
``{keyword}`` (URL-quoted) and ``{keyword_raw}``.
"""

from __future__ import annotations

import calendar
import datetime as dt
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_plus

__all__ = ["STEPS", "ParamSpace", "Unit", "check_template"]

STEPS = ("day", "week", "month")
#: Most units a campaign may have (a guard against a typo in a date).
MAX_UNITS = 100_000_000
FIELDS = frozenset({"date", "category", "keyword", "keyword_raw"})


@dataclass(frozen=True)
class Unit:
    """One task unit: its index in the space and its parameters (None: not used)."""

    index: int
    date: dt.date | None = None
    category: str | None = None
    keyword: str | None = None

    @property
    def label(self) -> str:
        """ "2026-01-03/c04/shoes": what the unit is, for people and the registry."""
        parts = [self.date.isoformat() if self.date else None, self.category, self.keyword]
        return "/".join(p for p in parts if p is not None) or f"#{self.index}"

    def as_dict(self) -> dict[str, str]:
        out = {}
        if self.date is not None:
            out["date"] = self.date.isoformat()
        if self.category is not None:
            out["category"] = self.category
        if self.keyword is not None:
            out["keyword"] = self.keyword
        return out

    def url(self, template: str) -> str:
        """*template* filled with this unit's parameters."""
        return template.format_map(
            {
                "date": self.date,
                "category": self.category,
                "keyword": quote_plus(self.keyword or ""),
                "keyword_raw": self.keyword,
            }
        )


def _add_months(day: dt.date, months: int) -> dt.date:
    month0 = day.month - 1 + months
    year, month = day.year + month0 // 12, month0 % 12 + 1
    return dt.date(year, month, min(day.day, calendar.monthrange(year, month)[1]))


def _date(value: Any, name: str) -> dt.date:
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError:
        raise ValueError(f"{name} must be a date like 2026-01-31, got {value!r}") from None


@dataclass(frozen=True)
class ParamSpace:
    """See the module docstring. Build with :meth:`from_dict` (checked)."""

    date_from: dt.date | None = None
    date_to: dt.date | None = None
    step: str = "day"
    categories: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    _dates: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        if (self.date_from is None) != (self.date_to is None):
            raise ValueError("dates need both a start (from) and an end (to)")
        if self.step not in STEPS:
            raise ValueError(f"step must be one of {', '.join(STEPS)}, got {self.step!r}")
        dates = 0
        if self.date_from is not None and self.date_to is not None:
            if self.date_to < self.date_from:
                raise ValueError(
                    f"the end date {self.date_to} is before the start date {self.date_from}"
                )
            dates = self._count_dates(self.date_from, self.date_to)
        object.__setattr__(self, "_dates", dates)
        for name, values in (("categories", self.categories), ("keywords", self.keywords)):
            if any(not isinstance(v, str) or not v.strip() for v in values):
                raise ValueError(f"{name} must be non-empty strings")
            if len(set(values)) != len(values):
                raise ValueError(f"{name} repeat a value")
        if not (dates or self.categories or self.keywords):
            raise ValueError("a campaign needs dates, categories or keywords")
        if self.size() > MAX_UNITS:
            raise ValueError(f"{self.size():,} units is more than {MAX_UNITS:,}")

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ParamSpace:
        """From ``{"from": ..., "to": ..., "step": ..., "categories": [...],
        "keywords": [...]}`` (every key optional); ValueError names what is wrong."""
        unknown = set(raw) - {"from", "to", "step", "categories", "keywords"}
        if unknown:
            raise ValueError(f"unknown parameter(s): {', '.join(sorted(unknown))}")
        return cls(
            date_from=_date(raw["from"], "from") if raw.get("from") else None,
            date_to=_date(raw["to"], "to") if raw.get("to") else None,
            step=str(raw.get("step") or "day"),
            categories=tuple(str(c) for c in raw.get("categories") or ()),
            keywords=tuple(str(k) for k in raw.get("keywords") or ()),
        )

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.date_from is not None and self.date_to is not None:
            out = {"from": self.date_from.isoformat(), "to": self.date_to.isoformat()}
            out["step"] = self.step
        if self.categories:
            out["categories"] = list(self.categories)
        if self.keywords:
            out["keywords"] = list(self.keywords)
        return out

    def _count_dates(self, start: dt.date, end: dt.date) -> int:
        days = (end - start).days
        if self.step == "day":
            return days + 1
        if self.step == "week":
            return days // 7 + 1
        months = (end.year - start.year) * 12 + end.month - start.month
        return months + (1 if _add_months(start, months) <= end else 0)

    def _date_at(self, i: int) -> dt.date:
        assert self.date_from is not None
        if self.step == "day":
            return self.date_from + dt.timedelta(days=i)
        if self.step == "week":
            return self.date_from + dt.timedelta(weeks=i)
        return _add_months(self.date_from, i)

    def size(self) -> int:
        """How many units the space holds."""
        return max(self._dates, 1) * max(len(self.categories), 1) * max(len(self.keywords), 1)

    def unit(self, index: int) -> Unit:
        """Unit *index* (0-based); IndexError outside the space."""
        if not 0 <= index < self.size():
            raise IndexError(f"unit {index} is outside 0..{self.size() - 1}")
        rest = index
        keyword = category = None
        date = None
        if self.keywords:
            rest, k = divmod(rest, len(self.keywords))
            keyword = self.keywords[k]
        if self.categories:
            rest, c = divmod(rest, len(self.categories))
            category = self.categories[c]
        if self._dates:
            date = self._date_at(rest)
        return Unit(index, date, category, keyword)

    def units(self, start: int = 0, stop: int | None = None) -> Iterable[Unit]:
        for i in range(start, self.size() if stop is None else min(stop, self.size())):
            yield self.unit(i)

    def extended(self, date_to: dt.date) -> ParamSpace:
        """This space with a later end date: its units keep their indexes only when
        dates vary slowest, which they do (new dates come after every existing unit)."""
        if self.date_to is None:
            raise ValueError("this campaign has no dates to extend")
        if date_to < self.date_to:
            raise ValueError(f"the new end {date_to} is before the current end {self.date_to}")
        return ParamSpace(self.date_from, date_to, self.step, self.categories, self.keywords)


def check_template(template: str, space: ParamSpace) -> None:
    """ValueError unless *template* is a URL template whose fields *space* fills."""
    try:
        names = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as exc:
        raise ValueError(f"url template {template!r}: {exc}") from None
    unknown = names - FIELDS
    if unknown:
        raise ValueError(
            f"url template: unknown field(s) {', '.join(sorted(unknown))} "
            f"(known: {', '.join(sorted(FIELDS))})"
        )
    given = {
        "date": space.date_from is not None,
        "category": bool(space.categories),
        "keyword": bool(space.keywords),
        "keyword_raw": bool(space.keywords),
    }
    missing = [n for n in names if not given[n]]
    if missing:
        raise ValueError(
            f"url template uses {', '.join(sorted(missing))}, which the campaign has not"
        )
    unused = [
        f"{{{dim}}}"
        for dim, used in (
            ("date", "date" in names),
            ("category", "category" in names),
            ("keyword", bool(names & {"keyword", "keyword_raw"})),
        )
        if given[dim] and not used
    ]
    if unused:
        raise ValueError(
            f"url template must use {', '.join(unused)}: each unit needs its own URL "
            "(units sharing one would be crawled once)"
        )
    if not template.startswith(("http://", "https://")):
        raise ValueError(f"url template must start with http:// or https://, got {template!r}")
    space.unit(0).url(template)  # a bad format spec shows here
