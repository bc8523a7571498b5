"""Changing mode of the test site: content pages that change on known schedules, for
tests and benchmarks of continuous crawling. Off by default (the site is static).

Pure and deterministic, like :class:`~crawlfleet.testsite.model.SiteModel`: which page
changes how, and the version of page ``n`` at site time ``t``, are functions of
``(model seed, n, t)`` and the :class:`Changing` options only. Site time is in *site
seconds* since the site started; ``time_scale`` site seconds pass per real second, so
that a test or a benchmark can compress an hour into a minute (``time_scale=60``).

Every content page (roots included) belongs to one class, by shares (``mix``), drawn
from the seed:

- ``minute``: a new version every 60 site seconds, ``hourly``: every 3600, each page at
  its own phase; version ``v`` of page ``n`` is born at ``v * interval - phase(n)``;
- ``never``: one version for ever;
- ``stamp``: one version for ever, but its ``updated_at`` timestamp is the fetch's site
  time (to the second), a change that is only noise.

A new version changes what a scraper extracts: a product's ``price``, an article's
``headline`` (and its first paragraph). Every page carries ``updated_at``
(``time.updated[datetime]``): the birth of its version, or the fetch time on ``stamp``
pages. In every class a share ``validators`` of the pages sends ``ETag`` and
``Last-Modified`` (of the content version, so a ``stamp`` page's validators never change)
and answers ``If-None-Match`` / ``If-Modified-Since`` with 304 while its version is the
same; the other pages send neither and ignore conditional headers. Timestamps are site
time from :data:`SITE_EPOCH`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import random
from collections.abc import Iterable
from email.utils import format_datetime, parsedate_to_datetime
from typing import Literal, get_args

from crawlfleet.testsite import text
from crawlfleet.testsite.model import Article, Product, SiteModel

__all__ = [
    "CHANGE_CLASSES",
    "DEFAULT_MIX",
    "INTERVALS",
    "SITE_EPOCH",
    "Changing",
    "Schedule",
    "change_mix",
    "etag_matches",
    "iso_time",
    "modified_since",
    "site_datetime",
]

ChangeClass = Literal["minute", "hourly", "never", "stamp"]
#: Every class of page, in the order of :data:`DEFAULT_MIX`.
CHANGE_CLASSES: tuple[ChangeClass, ...] = get_args(ChangeClass)
#: Site seconds between two versions, by class (the others never change).
INTERVALS: dict[str, float] = {"minute": 60.0, "hourly": 3600.0}
DEFAULT_MIX: tuple[tuple[str, float], ...] = tuple((name, 1.0) for name in CHANGE_CLASSES)
#: Site time 0 as a date: what ``updated_at`` and ``Last-Modified`` count from.
SITE_EPOCH = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
# Prices of versions 1, 2, ...: base + 1 + (v * _STEP + offset) % _SPAN cents, so that
# two consecutive versions never share a price (_STEP % _SPAN != 0).
_STEP, _SPAN = 7919, 997


def change_mix(spec: str) -> tuple[tuple[str, float], ...]:
    """The mix of a spec such as ``"minute=1,hourly=2,never=1"`` (not validated); a
    value that is no number raises :class:`ValueError` naming ``mix``."""
    mix = []
    for part in spec.split(","):
        if not part.strip():
            continue
        name, _, weight = part.partition("=")
        try:
            mix.append((name.strip(), float(weight)))
        except ValueError:
            raise ValueError(f"mix must be CLASS=WEIGHT,..., got {part.strip()!r}") from None
    return tuple(mix)


@dataclasses.dataclass(frozen=True)
class Changing:
    """How the site changes (see the module docstring); the constructor raises
    :class:`ValueError` naming the first bad field.

    ``time_scale``: site seconds per real second (> 0); ``validators``: the share of
    each class's pages that send ``ETag`` and ``Last-Modified`` (0..1); ``mix``: ``(class,
    weight)`` pairs, weights >= 0 and not all 0, each class at most once (a class left
    out has no pages).
    """

    time_scale: float = 1.0
    validators: float = 0.5
    mix: tuple[tuple[str, float], ...] = DEFAULT_MIX

    def __post_init__(self) -> None:
        if not _finite(self.time_scale) or self.time_scale <= 0:
            raise ValueError(f"time_scale must be a number > 0, got {self.time_scale!r}")
        if not _finite(self.validators) or not 0 <= self.validators <= 1:
            raise ValueError(f"validators must be a share between 0 and 1, got {self.validators!r}")
        mix = tuple((str(name), weight) for name, weight in self.mix)
        names = [name for name, _ in mix]
        unknown = [name for name in names if name not in CHANGE_CLASSES]
        if unknown or len(set(names)) != len(names):
            raise ValueError(
                f"mix must name distinct classes out of {', '.join(CHANGE_CLASSES)}, "
                f"got {', '.join(names) or 'none'}"
            )
        if any(not _finite(w) or w < 0 for _, w in mix) or not any(w > 0 for _, w in mix):
            raise ValueError(f"mix weights must be numbers >= 0, not all 0, got {mix!r}")
        object.__setattr__(self, "mix", mix)

    @property
    def spec(self) -> str:
        """``mix`` as ``crawlfleet site --change-mix`` takes it."""
        return ",".join(f"{name}={weight:g}" for name, weight in self.mix)


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class Schedule:
    """The change schedule of ``model``'s content pages under ``changing``: pure."""

    def __init__(self, model: SiteModel, changing: Changing) -> None:
        self.model = model
        self.changing = changing
        pages = model.pages
        ids = list(range(pages))
        rng = random.Random(f"{model.seed}:changing")
        rng.shuffle(ids)
        self._class: list[str] = [""] * pages
        self._validators = [False] * pages
        start = 0
        for name, count in zip(CHANGE_CLASSES, self._apportion(pages), strict=True):
            members = sorted(ids[start : start + count])
            start += count
            for n in members:
                self._class[n] = name
            for n in rng.sample(members, round(changing.validators * len(members))):
                self._validators[n] = True
        self._phase = [
            random.Random(f"{model.seed}:phase:{n}").random() * INTERVALS.get(self._class[n], 0.0)
            for n in range(pages)
        ]

    def _apportion(self, pages: int) -> list[int]:
        """Pages per class (in :data:`CHANGE_CLASSES` order) by the mix's weights, by
        largest remainders: the counts add up to ``pages``."""
        weights = dict(self.changing.mix)
        total = sum(weights.values())
        exact = [pages * weights.get(name, 0.0) / total for name in CHANGE_CLASSES]
        counts = [math.floor(x) for x in exact]
        by_remainder = sorted(range(len(exact)), key=lambda i: counts[i] - exact[i])
        for i in by_remainder[: pages - sum(counts)]:
            counts[i] += 1
        return counts

    # -- classes --------------------------------------------------------------------

    def page_class(self, n: int) -> str:
        """The class of page ``n``: one of :data:`CHANGE_CLASSES`."""
        return self._class[n]

    def pages_of(self, name: str) -> list[int]:
        """The pages of class ``name``, in id order."""
        return [n for n, c in enumerate(self._class) if c == name]

    def interval(self, n: int) -> float | None:
        """Site seconds between versions of page ``n``; ``None``: it never changes."""
        return INTERVALS.get(self._class[n])

    def has_validators(self, n: int) -> bool:
        """Whether page ``n`` sends ``ETag`` and ``Last-Modified``."""
        return self._validators[n]

    # -- versions -------------------------------------------------------------------

    def version(self, n: int, t: float) -> int:
        """The version of page ``n`` at site time ``t`` (0 at ``t == 0`` or soon after)."""
        interval = self.interval(n)
        if interval is None:
            return 0
        return math.floor((t + self._phase[n]) / interval)

    def birth(self, n: int, v: int) -> float:
        """The site time at which version ``v`` of page ``n`` appeared (``<= 0`` for the
        version the site starts with)."""
        interval = self.interval(n)
        return 0.0 if interval is None else v * interval - self._phase[n]

    def births_between(self, n: int, start: float, end: float) -> int:
        """How many versions of page ``n`` appear in site time ``(start, end]``."""
        if end <= start:
            return 0
        return self.version(n, end) - self.version(n, start)

    def updated_at(self, n: int, t: float) -> float:
        """The site time page ``n`` shows as ``updated_at`` at ``t``: the fetch time
        (whole seconds) for ``stamp`` pages, else its version's birth."""
        if self._class[n] == "stamp":
            return float(math.floor(t))
        return self.birth(n, self.version(n, t))

    def etag(self, n: int, v: int) -> str:
        """The (strong) ``ETag`` of version ``v`` of page ``n``, quotes included."""
        return f'"cf{self.model.seed}-{n}-{v}"'

    def last_modified(self, n: int, v: int) -> str:
        """The ``Last-Modified`` of version ``v`` of page ``n``: an HTTP date."""
        return format_datetime(site_datetime(math.floor(self.birth(n, v))), usegmt=True)

    # -- items ----------------------------------------------------------------------

    def product(self, n: int, v: int) -> Product:
        """Product page ``n`` as version ``v`` shows it: a price of its own."""
        product = self.model.product(n)
        if v == 0:
            return product
        base = round(float(product.price) * 100)
        offset = random.Random(f"{self.model.seed}:price:{n}").randrange(_SPAN)
        cents = base + 1 + (v * _STEP + offset) % _SPAN
        return dataclasses.replace(product, price=f"{cents / 100:.2f}")

    def article(self, n: int, v: int) -> Article:
        """Article page ``n`` as version ``v`` shows it: headline and first paragraph."""
        article = self.model.article(n)
        if v == 0:
            return article
        rng = random.Random(f"{self.model.seed}:article:{n}:{v}")
        paragraphs = (text.paragraph(rng), *article.paragraphs[1:])
        headline = f"{article.headline} (update {v})"
        return dataclasses.replace(article, headline=headline, paragraphs=paragraphs)


def site_datetime(t: float) -> dt.datetime:
    """Site time ``t`` (site seconds) as an aware UTC datetime."""
    return SITE_EPOCH + dt.timedelta(seconds=t)


def iso_time(t: float) -> str:
    """Site time ``t`` as ``YYYY-MM-DDTHH:MM:SSZ`` (whole seconds, rounded down)."""
    return site_datetime(math.floor(t)).strftime("%Y-%m-%dT%H:%M:%SZ")


def etag_matches(header: str, etag: str) -> bool:
    """Whether an ``If-None-Match`` header matches ``etag`` (weak comparison, ``*``)."""
    tags: Iterable[str] = (tag.strip() for tag in header.split(","))
    plain = etag.removeprefix("W/")
    return any(tag == "*" or tag.removeprefix("W/") == plain for tag in tags)


def modified_since(header: str, last_modified: str) -> bool | None:
    """Whether ``last_modified`` is later than an ``If-Modified-Since`` header (both HTTP
    dates); ``None`` if the header is no valid date (it is then ignored)."""
    try:
        since = parsedate_to_datetime(header)
    except (TypeError, ValueError, IndexError):
        return None
    if since.tzinfo is None:
        since = since.replace(tzinfo=dt.UTC)
    return parsedate_to_datetime(last_modified) > since
