"""The test site's date x category archive: a closed, paginated part of host 0.

A *unit* is ``(date, category)``: ``archive_dates`` consecutive days from
``archive_start`` times the ``archive_categories``. Each unit holds a seeded number of
documents, 0 to :data:`MAX_DOCS_PER_UNIT` (mean 6, so some units are empty). Paths, all
on host 0 (``127.0.0.1``) only:

- ``/archive/<YYYY-MM-DD>/<category>``: listing page 1 of the unit;
  ``...?page=K`` (``2 <= K``) the others. :data:`ARCHIVE_PAGE_SIZE` documents a page in
  order, ``a.prev[rel=prev]`` and ``a.next[rel=next]`` links; an empty unit has one
  listing page, holding ``p.empty``;
- ``/archive/<YYYY-MM-DD>/<category>/<i>`` (``1 <= i <= n``): document ``i``, an
  ``article.doc`` holding ``h1.title``, ``span.date`` (ISO), ``span.category`` and
  ``div.body`` (one ``<p>`` per paragraph), with ``a.up`` back to listing page 1.

Every link is root-relative and stays inside its unit, so crawling a unit from its first
listing page fetches exactly its listing pages and documents. Anything else under
``/archive/`` (an unknown date or category, ``?page=1``, a page or document past the
end) is no archive page: the server answers 404.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Literal

from crawlfleet.testsite import text

__all__ = [
    "ARCHIVE_PAGE_SIZE",
    "DEFAULT_ARCHIVE_START",
    "MAX_ARCHIVE_CATEGORIES",
    "MAX_ARCHIVE_DATES",
    "MAX_ARCHIVE_UNITS",
    "MAX_DOCS_PER_UNIT",
    "Archive",
    "ArchiveDoc",
    "ArchivePage",
    "Unit",
    "category_names",
]

#: ``(ISO date, category)``: one unit of the archive.
Unit = tuple[str, str]

ARCHIVE_PAGE_SIZE = 5
MAX_DOCS_PER_UNIT = 12
MAX_ARCHIVE_DATES = 36_600
MAX_ARCHIVE_CATEGORIES = 1_000
#: Most units (dates x categories): the server plans flaky URLs over all documents.
MAX_ARCHIVE_UNITS = 100_000
DEFAULT_ARCHIVE_START = dt.date(2026, 1, 1)
_CATEGORY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,39}")
_PREFIX = "/archive/"


def category_names(count: int) -> tuple[str, ...]:
    """``count`` category names ``c00``, ``c01``, ... (wider when ``count > 100``)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"archive_categories must be an integer >= 0, got {count!r}")
    width = max(2, len(str(count - 1)))
    return tuple(f"c{i:0{width}d}" for i in range(count))


@dataclass(frozen=True)
class ArchiveDoc:
    """Document ``number`` (from 1) of unit ``(date, category)``."""

    date: str
    category: str
    number: int
    title: str
    paragraphs: tuple[str, ...]

    @property
    def body(self) -> str:
        """The paragraphs joined by blank lines."""
        return "\n\n".join(self.paragraphs)


@dataclass(frozen=True)
class ArchivePage:
    """What an archive path serves: listing page ``number`` or document ``number`` of
    ``unit`` (both from 1)."""

    kind: Literal["listing", "document"]
    unit: Unit
    number: int


class Archive:
    """The archive of a model with this ``seed``; empty when ``dates`` is 0 or there are
    no ``categories``. Raises :class:`ValueError` naming the model field that is wrong
    (``archive_dates``, ``archive_categories``, ``archive_start``).
    """

    def __init__(
        self,
        seed: int,
        dates: int = 0,
        categories: Sequence[str] = (),
        start: dt.date = DEFAULT_ARCHIVE_START,
    ) -> None:
        if isinstance(dates, bool) or not isinstance(dates, int):
            raise ValueError(f"archive_dates must be an integer, got {dates!r}")
        if not 0 <= dates <= MAX_ARCHIVE_DATES:
            raise ValueError(
                f"archive_dates must be between 0 and {MAX_ARCHIVE_DATES}, got {dates}"
            )
        if isinstance(categories, str) or not isinstance(categories, Sequence):
            raise ValueError(f"archive_categories must be a sequence of names, got {categories!r}")
        if len(categories) > MAX_ARCHIVE_CATEGORIES:
            raise ValueError(
                f"archive_categories must hold at most {MAX_ARCHIVE_CATEGORIES} names, "
                f"got {len(categories)}"
            )
        for name in categories:
            if not isinstance(name, str) or not _CATEGORY.fullmatch(name):
                raise ValueError(
                    "archive_categories must be names of letters, digits, '_' and '-' "
                    f"(up to 40), got {name!r}"
                )
        if len(set(categories)) != len(categories):
            raise ValueError(f"archive_categories must be distinct, got {list(categories)}")
        if dates and not categories:
            raise ValueError("archive_categories must not be empty when archive_dates is > 0")
        if dates * len(categories) > MAX_ARCHIVE_UNITS:
            raise ValueError(
                f"archive_dates x archive_categories must be at most {MAX_ARCHIVE_UNITS} "
                f"units, got {dates} x {len(categories)}"
            )
        if not isinstance(start, dt.date) or isinstance(start, dt.datetime):
            raise ValueError(f"archive_start must be a date, got {start!r}")
        try:
            last = start + dt.timedelta(days=max(dates - 1, 0))
        except OverflowError:
            raise ValueError(f"archive_start is too late for {dates} dates: {start}") from None
        self.seed = seed
        self.dates = tuple((start + dt.timedelta(days=d)).isoformat() for d in range(dates))
        self.categories = tuple(categories) if dates else ()
        self.last_date = last.isoformat()
        self._date_set = frozenset(self.dates)
        self._category_set = frozenset(self.categories)
        self._counts: dict[Unit, int] = {}
        self._url_count: int | None = None

    def __bool__(self) -> bool:
        return bool(self.dates)

    # -- units ----------------------------------------------------------------------

    def units(self) -> list[Unit]:
        """Every unit, by date, then category in the configured order."""
        return [(d, c) for d in self.dates for c in self.categories]

    def unit_count(self) -> int:
        return len(self.dates) * len(self.categories)

    def is_unit(self, unit: Unit) -> bool:
        return unit[0] in self._date_set and unit[1] in self._category_set

    def doc_count(self, unit: Unit) -> int:
        """How many documents ``unit`` holds (0 to :data:`MAX_DOCS_PER_UNIT`)."""
        self._check(unit)
        count = self._counts.get(unit)
        if count is None:
            rng = random.Random(f"{self.seed}:archive:{unit[0]}:{unit[1]}")
            count = self._counts[unit] = rng.randint(0, MAX_DOCS_PER_UNIT)
        return count

    def page_count(self, unit: Unit) -> int:
        """How many listing pages ``unit`` has (at least 1)."""
        return max(1, -(-self.doc_count(unit) // ARCHIVE_PAGE_SIZE))

    def listing_path(self, unit: Unit, k: int = 1) -> str:
        """The path of listing page ``k`` of ``unit`` (no query for page 1)."""
        if not 1 <= k <= self.page_count(unit):
            raise ValueError(f"unit {unit} has no listing page {k}")
        base = f"{_PREFIX}{unit[0]}/{unit[1]}"
        return base if k == 1 else f"{base}?page={k}"

    def doc_path(self, unit: Unit, i: int) -> str:
        if not 1 <= i <= self.doc_count(unit):
            raise ValueError(f"unit {unit} has no document {i}")
        return f"{_PREFIX}{unit[0]}/{unit[1]}/{i}"

    def listing_paths(self, unit: Unit) -> list[str]:
        return [self.listing_path(unit, k) for k in range(1, self.page_count(unit) + 1)]

    def doc_paths(self, unit: Unit) -> list[str]:
        return [self.doc_path(unit, i) for i in range(1, self.doc_count(unit) + 1)]

    def page_entries(self, unit: Unit, k: int) -> range:
        """Document numbers listed on listing page ``k``."""
        start = (k - 1) * ARCHIVE_PAGE_SIZE + 1
        return range(start, min(start + ARCHIVE_PAGE_SIZE, self.doc_count(unit) + 1))

    def document(self, unit: Unit, i: int) -> ArchiveDoc:
        """Document ``i`` of ``unit``; ``ValueError`` if there is none."""
        self.doc_path(unit, i)
        rng = random.Random(f"{self.seed}:archive:{unit[0]}:{unit[1]}:{i}")
        return ArchiveDoc(
            date=unit[0],
            category=unit[1],
            number=i,
            title=f"{text.headline(rng)} ({unit[1]} {unit[0]} #{i})",
            paragraphs=tuple(text.paragraph(rng) for _ in range(rng.randint(2, 4))),
        )

    # -- paths ----------------------------------------------------------------------

    def resolve(self, path: str) -> ArchivePage | None:
        """What ``path`` (with query) serves, or ``None`` if it is no archive page."""
        if not path.startswith(_PREFIX) or not self.dates:
            return None
        rest, _, query = path[len(_PREFIX) :].partition("?")
        parts = rest.split("/")
        if len(parts) not in (2, 3) or not self.is_unit((parts[0], parts[1])):
            return None
        unit = (parts[0], parts[1])
        if len(parts) == 3:
            i = _number(parts[2])
            if query or path.endswith("?") or i is None or not i <= self.doc_count(unit):
                return None
            return ArchivePage("document", unit, i)
        if not query:
            return None if path.endswith("?") else ArchivePage("listing", unit, 1)
        k = _number(query[5:]) if query.startswith("page=") else None
        if k is None or not 2 <= k <= self.page_count(unit):
            return None
        return ArchivePage("listing", unit, k)

    def doc_path_list(self) -> list[str]:
        """Every document path of every unit."""
        return [p for unit in self.units() for p in self.doc_paths(unit)]

    def url_count(self) -> int:
        """Listing pages plus documents, all units."""
        if self._url_count is None:
            self._url_count = sum(self.page_count(u) + self.doc_count(u) for u in self.units())
        return self._url_count

    # -- HTML -----------------------------------------------------------------------

    def render(self, page: ArchivePage) -> bytes:
        """The UTF-8 HTML of ``page``."""
        unit = page.unit
        if page.kind == "document":
            return _document_html(self.document(unit, page.number), self.listing_path(unit))
        k = page.number
        items = "".join(
            f'<li><a class="doc" href="{self.doc_path(unit, i)}">'
            f"{escape(self.document(unit, i).title)}</a></li>\n"
            for i in self.page_entries(unit, k)
        )
        body = f'<ol class="archive-list">\n{items}</ol>\n' if items else ""
        if not items:
            body = '<p class="empty">No documents.</p>\n'
        pager = []
        if k > 1:
            prev = self.listing_path(unit, k - 1)
            pager.append(f'<a class="prev" rel="prev" href="{escape(prev)}">Previous page</a>')
        if k < self.page_count(unit):
            following = self.listing_path(unit, k + 1)
            pager.append(f'<a class="next" rel="next" href="{escape(following)}">Next page</a>')
        title = f"Archive {unit[0]} {unit[1]}, page {k} of {self.page_count(unit)}"
        html = (
            f"{_head(title)}<main>\n"
            f'<h1 class="listing-title" data-date="{unit[0]}" data-category="{unit[1]}">'
            f"{escape(title)}</h1>\n{body}"
            f'<nav class="pagination">{" ".join(pager)}</nav>\n</main>\n</body>\n</html>\n'
        )
        return html.encode("utf-8")

    def _check(self, unit: Unit) -> None:
        if not self.is_unit(unit):
            raise ValueError(f"no archive unit {unit!r}")


def _number(value: str) -> int | None:
    """``value`` as a positive integer written without sign or leading zeros."""
    if not value.isascii() or not value.isdigit() or value != str(int(value)):
        return None
    return int(value) or None


def _head(title: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escape(title)}</title>\n</head>\n<body>\n"
    )


def _document_html(doc: ArchiveDoc, listing: str) -> bytes:
    paragraphs = "".join(f"<p>{escape(p)}</p>\n" for p in doc.paragraphs)
    html = (
        f"{_head(doc.title)}<main>\n"
        f'<article class="doc" data-number="{doc.number}">\n'
        f'<h1 class="title">{escape(doc.title)}</h1>\n'
        f'<p class="meta"><span class="date">{doc.date}</span> in '
        f'<span class="category">{doc.category}</span></p>\n'
        f'<div class="body">\n{paragraphs}</div>\n</article>\n'
        f'<p><a class="up" href="{escape(listing)}">Back to the listing</a></p>\n'
        "</main>\n</body>\n</html>\n"
    )
    return html.encode("utf-8")
