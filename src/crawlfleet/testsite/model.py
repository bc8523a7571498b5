"""The test site's content and link graph, as data: what every URL serves and links to.

A :class:`SiteModel` is pure and deterministic: the same arguments always describe the
same site, whatever the port it is served on. Resources are addressed by a
:data:`Loc` ``(host index, path with query)``; URLs are made from a ``Loc`` and a port.

Layout (``H`` hosts, host ``i`` is ``127.0.0.{i+1}``, all on one port):

- content page ``n`` (``0 <= n < pages``) lives on host ``n % H``; pages ``0..H-1`` are
  the hosts' roots ``/``, the others are ``/p/<n>``. Every page carries exactly one item:
  a product, or an article for the pages in :attr:`SiteModel.article_ids`;
- ``/catalog?page=K`` (``K >= 1``) on each host lists that host's pages in id order,
  :data:`CATALOG_PAGE_SIZE` to a page, with next/previous links; the root links to
  ``?page=1``, so every content page is reachable from the roots whatever the links;
- with ``problems``: links to ``/status/404``, ``/status/500``, ``/slow``, redirects
  ``/r/<n>`` (302 to page ``n``), a JSON feed and a PNG on every root, and a few product
  pages served in legacy encodings (:attr:`SiteModel.encoded_pages`);
- with ``archive_dates`` and ``archive_categories``: a date x category archive on host 0
  under ``/archive/``, linked from nowhere else (:mod:`crawlfleet.testsite.archive`;
  not part of :meth:`SiteModel.content_locs`).
"""

from __future__ import annotations

import codecs
import datetime as dt
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from crawlfleet.testsite import text
from crawlfleet.testsite.archive import DEFAULT_ARCHIVE_START, Archive, Unit

__all__ = [
    "CATALOG_PAGE_SIZE",
    "FEATURED_PER_ROOT",
    "MAX_HOSTS",
    "ODD_FILES",
    "Article",
    "EncodingCase",
    "Link",
    "LinkForm",
    "Loc",
    "Product",
    "SiteModel",
    "host_address",
]

#: ``(host index, path with query)``: one resource of the site, independent of the port.
Loc = tuple[int, str]
#: How an ``href`` spells its target (see :func:`crawlfleet.testsite.render.href`).
LinkForm = Literal["absolute", "scheme-relative", "root-relative", "relative", "query"]

MAX_HOSTS = 8
CATALOG_PAGE_SIZE = 20
#: How many of its host's pages a root features (besides the catalogue link).
FEATURED_PER_ROOT = 8
ODD_FILES = ("/feed.json", "/logo.png")
_FRAGMENTS = ("#reviews", "#top", "#details")
_SAME_HOST_FORMS: tuple[LinkForm, ...] = ("absolute", "root-relative", "relative")
_CROSS_HOST_FORMS: tuple[LinkForm, ...] = ("absolute", "absolute", "scheme-relative")
# (codec, Content-Type charset, <meta charset>): the legacy-encoded pages, in order.
_ENCODING_CASES: tuple[tuple[str, str | None, str | None], ...] = (
    ("gbk", "GBK", None),
    ("shift_jis", None, "Shift_JIS"),
    ("big5", "Big5", "Big5"),
    ("latin-1", None, None),
    ("latin-1", "utf-8", None),  # wrongly declared: the bytes are latin-1
    ("shift_jis", None, None),
)


def host_address(host: int) -> str:
    """The loopback address of host index ``host``: ``127.0.0.{host+1}``."""
    return f"127.0.0.{host + 1}"


@dataclass(frozen=True)
class Link:
    """One ``<a href>`` of a page: its target resource and how the href spells it.

    ``fragment`` (with its ``#``) is appended to the href; it never changes the target.
    """

    host: int
    path: str
    form: LinkForm
    fragment: str = ""

    @property
    def loc(self) -> Loc:
        return (self.host, self.path)


@dataclass(frozen=True)
class Product:
    """The item of a product page; ``price`` is a decimal string, ``date`` ISO 8601."""

    page: int
    title: str
    price: str
    date: str
    date_human: str
    sku: str
    description: str


@dataclass(frozen=True)
class Article:
    """The item of an article page; :attr:`text` is its main text, boilerplate excluded."""

    page: int
    headline: str
    author: str
    date: str
    date_human: str
    paragraphs: tuple[str, ...]

    @property
    def text(self) -> str:
        """The paragraphs joined by blank lines (the headline is not part of it)."""
        return "\n\n".join(self.paragraphs)


@dataclass(frozen=True)
class EncodingCase:
    """A product page served in ``codec`` instead of UTF-8.

    ``header_charset`` is the ``charset`` of the Content-Type (``None``: not declared),
    ``meta_charset`` the ``<meta charset>`` (``None``: absent); either may be wrong.
    ``title`` and ``description`` are the true text of the product's item.
    """

    page: int
    codec: str
    header_charset: str | None
    meta_charset: str | None
    title: str
    description: str

    @property
    def content_type(self) -> str:
        if self.header_charset is None:
            return "text/html"
        return f"text/html; charset={self.header_charset}"

    @property
    def declared_correctly(self) -> bool:
        """Whether the header or meta charset names the true codec."""
        declared = self.header_charset or self.meta_charset
        return declared is not None and _same_codec(declared, self.codec)


def _same_codec(label: str, codec: str) -> bool:
    return codecs.lookup(label).name == codecs.lookup(codec).name


def _check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"between {low} and {high}"
        raise ValueError(f"{name} must be {bounds}, got {value}")
    return value


@dataclass
class _Layout:
    """What the model decides site-wide from ``Random(seed)``; computed once."""

    article_ids: frozenset[int]
    encoded: dict[int, EncodingCase]
    extra_links: dict[int, list[Link]]
    problem_locs: dict[str, tuple[Loc, ...]]
    cache: dict[tuple[str, int], object] = field(default_factory=dict)
    archive: Archive | None = None


@dataclass(frozen=True)
class SiteModel:
    """A deterministic website: ``pages`` content pages over ``hosts`` loopback hosts.

    ``articles`` (``None``: a tenth of the pages) of the non-root pages are articles, the
    rest products. ``links_per_page`` random links per page, within and across hosts,
    spelled in varying forms, with one exact duplicate and one ``#fragment`` duplicate.
    ``menu_pages``: the menu of every page also links to the first that many pages of its
    host (navigation links repeated on every page, as real sites have; none by default),
    so that a page carries ``2 + menu_pages`` navigation links.
    ``archive_dates`` days from ``archive_start`` times ``archive_categories`` make the
    archive (:attr:`archive`; empty by default). The constructor raises
    :class:`ValueError` naming the first bad argument; afterwards ``articles`` is always
    an ``int`` and ``archive_categories`` a tuple.
    """

    pages: int = 200
    hosts: int = 3
    seed: int = 1
    links_per_page: int = 6
    problems: bool = True
    articles: int | None = None
    archive_dates: int = 0
    archive_categories: tuple[str, ...] = ()
    archive_start: dt.date = DEFAULT_ARCHIVE_START
    menu_pages: int = 0
    _layout: _Layout = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_int("hosts", self.hosts, 1, MAX_HOSTS)
        _check_int("pages", self.pages, self.hosts)
        _check_int("seed", self.seed, -(2**63))
        _check_int("links_per_page", self.links_per_page, 0, 100)
        _check_int("menu_pages", self.menu_pages, 0, 100)
        if not isinstance(self.problems, bool):
            raise ValueError(f"problems must be a bool, got {self.problems!r}")
        non_roots = self.pages - self.hosts
        if self.articles is None:
            object.__setattr__(self, "articles", min(self.pages // 10, non_roots))
        _check_int("articles", self.articles, 0, non_roots)
        if isinstance(self.archive_categories, list):
            object.__setattr__(self, "archive_categories", tuple(self.archive_categories))
        archive = Archive(
            self.seed, self.archive_dates, self.archive_categories, self.archive_start
        )
        object.__setattr__(self, "_layout", self._plan())
        self._layout.archive = archive

    # -- addressing -----------------------------------------------------------------

    def host_of(self, n: int) -> int:
        """The host index of page ``n``."""
        return n % self.hosts

    def path_of(self, n: int) -> str:
        """``/`` for a root, ``/p/<n>`` otherwise."""
        return "/" if n < self.hosts else f"/p/{n}"

    def loc_of(self, n: int) -> Loc:
        self._check_page(n)
        return (self.host_of(n), self.path_of(n))

    def page_at(self, loc: Loc) -> int | None:
        """The page id served at ``loc``, or ``None`` if it is no content page."""
        host, path = loc
        if path == "/":
            return host if 0 <= host < self.hosts else None
        if not path.startswith("/p/") or not path[3:].isdigit() or path[3:] != str(int(path[3:])):
            return None
        n = int(path[3:])
        return n if self.hosts <= n < self.pages and self.host_of(n) == host else None

    @staticmethod
    def loc_url(loc: Loc, port: int) -> str:
        return f"http://{host_address(loc[0])}:{port}{loc[1]}"

    def url(self, n: int, port: int) -> str:
        """The canonical URL of page ``n``."""
        return self.loc_url(self.loc_of(n), port)

    def seed_urls(self, port: int) -> list[str]:
        """The roots of all hosts, host 0 first."""
        return [self.url(h, port) for h in range(self.hosts)]

    # -- pages and items ------------------------------------------------------------

    @property
    def article_ids(self) -> frozenset[int]:
        return self._layout.article_ids

    def is_article(self, n: int) -> bool:
        self._check_page(n)
        return n in self._layout.article_ids

    @property
    def encoded_pages(self) -> Mapping[int, EncodingCase]:
        """Legacy-encoded product pages by page id (empty without ``problems``)."""
        return self._layout.encoded

    def product(self, n: int) -> Product:
        """The item of product page ``n``; ``ValueError`` if ``n`` is an article."""
        if self.is_article(n):
            raise ValueError(f"page {n} is an article, not a product")
        cached = self._layout.cache.get(("product", n))
        if isinstance(cached, Product):
            return cached
        rng = random.Random(f"{self.seed}:product:{n}")
        title, description = text.product_title(rng), text.paragraph(rng)
        day = text.random_date(rng)
        case = self._layout.encoded.get(n)
        if case is not None:
            title, description = case.title, case.description
        else:
            title = f"{title} {n}"
        product = Product(
            page=n,
            title=title,
            price=f"{rng.randint(100, 99_999) / 100:.2f}",
            date=day.isoformat(),
            date_human=text.human_date(day),
            sku=f"CF-{n:06d}-{rng.randint(100, 999)}",
            description=description,
        )
        self._layout.cache[("product", n)] = product
        return product

    def article(self, n: int) -> Article:
        """The item of article page ``n``; ``ValueError`` if ``n`` is a product."""
        if not self.is_article(n):
            raise ValueError(f"page {n} is a product, not an article")
        cached = self._layout.cache.get(("article", n))
        if isinstance(cached, Article):
            return cached
        rng = random.Random(f"{self.seed}:article:{n}")
        day = text.random_date(rng)
        article = Article(
            page=n,
            headline=f"{text.headline(rng)} ({n})",
            author=text.person_name(rng),
            date=day.isoformat(),
            date_human=text.human_date(day),
            paragraphs=tuple(text.paragraph(rng) for _ in range(rng.randint(4, 7))),
        )
        self._layout.cache[("article", n)] = article
        return article

    def article_text(self, n: int) -> str:
        """The true main text of article ``n`` (paragraphs separated by blank lines)."""
        return self.article(n).text

    # -- links ----------------------------------------------------------------------

    def page_links(self, n: int) -> tuple[Link, ...]:
        """The body links of page ``n`` ("see also" / "related"): random targets,
        one exact duplicate, one fragment duplicate, then any problem links."""
        self._check_page(n)
        cached = self._layout.cache.get(("links", n))
        if isinstance(cached, tuple):
            return cached
        rng = random.Random(f"{self.seed}:links:{n}")
        links: list[Link] = []
        for _ in range(self.links_per_page):
            target = rng.randrange(self.pages)
            if target == n and self.pages > 1:
                target = (target + 1) % self.pages
            links.append(self._link_to(self.host_of(n), self.loc_of(target), rng))
        if links:
            links.append(rng.choice(links))
            twin = rng.choice(links)
            links.append(Link(twin.host, twin.path, twin.form, rng.choice(_FRAGMENTS)))
        result = (*links, *self._layout.extra_links.get(n, ()))
        self._layout.cache[("links", n)] = result
        return result

    def nav_links(self, host: int) -> tuple[Link, ...]:
        """The menu of every page on ``host``: its root, its first catalogue page, then
        its first ``menu_pages`` other pages."""
        menu = range(host + self.hosts, self.pages, self.hosts)[: self.menu_pages]
        return (
            Link(host, "/", "root-relative"),
            Link(host, "/catalog?page=1", "root-relative"),
            *(Link(host, self.path_of(m), "root-relative") for m in menu),
        )

    def featured_links(self, n: int) -> tuple[Link, ...]:
        """The first pages of a root's host (empty for non-roots)."""
        if n >= self.hosts:
            return ()
        ids = range(n + self.hosts, self.pages, self.hosts)[:FEATURED_PER_ROOT]
        forms: tuple[LinkForm, LinkForm] = ("relative", "root-relative")
        return tuple(Link(n, self.path_of(m), forms[i % 2]) for i, m in enumerate(ids))

    def file_links(self, n: int) -> tuple[Link, ...]:
        """The odd (non-HTML) files a root links to when ``problems`` is on."""
        if n >= self.hosts or not self.problems:
            return ()
        return tuple(Link(n, path, "relative") for path in ODD_FILES)

    def catalog_page_count(self, host: int) -> int:
        count = len(range(host, self.pages, self.hosts))
        return -(-count // CATALOG_PAGE_SIZE)

    def catalog_entries(self, host: int, k: int) -> range:
        """Page ids listed on ``/catalog?page=k`` of ``host`` (``k`` from 1)."""
        start = (k - 1) * CATALOG_PAGE_SIZE
        return range(host, self.pages, self.hosts)[start : start + CATALOG_PAGE_SIZE]

    def catalog_links(self, host: int, k: int) -> tuple[Link, ...]:
        """Entries of a catalogue page, then its previous and next links."""
        forms: tuple[LinkForm, LinkForm] = ("relative", "root-relative")
        links = [
            Link(host, self.path_of(m), forms[i % 2])
            for i, m in enumerate(self.catalog_entries(host, k))
        ]
        if k > 1:
            links.append(Link(host, f"/catalog?page={k - 1}", "root-relative"))
        if k < self.catalog_page_count(host):
            links.append(Link(host, f"/catalog?page={k + 1}", "query"))
        return tuple(links)

    def catalog_locs(self) -> list[Loc]:
        return [
            (h, f"/catalog?page={k}")
            for h in range(self.hosts)
            for k in range(1, self.catalog_page_count(h) + 1)
        ]

    def outlinks(self, loc: Loc) -> frozenset[Loc]:
        """Targets a crawler finds at ``loc``: links of pages and catalogues, the target
        of a redirect, nothing for anything else."""
        host, path = loc
        n = self.page_at(loc)
        if n is not None:
            links = (
                *self.nav_links(host),
                *self.featured_links(n),
                *self.page_links(n),
                *self.file_links(n),
            )
            return frozenset(link.loc for link in links)
        if path.startswith("/catalog?page="):
            k = int(path.partition("=")[2])
            return frozenset(
                link.loc for link in (*self.nav_links(host), *self.catalog_links(host, k))
            )
        target = self.redirect_target(loc)
        return frozenset() if target is None else frozenset({self.loc_of(target)})

    def redirect_target(self, loc: Loc) -> int | None:
        """The page ``/r/<n>`` redirects to (on any host), or ``None``."""
        path = loc[1]
        if path.startswith("/r/") and path[3:].isdigit() and int(path[3:]) < self.pages:
            return int(path[3:])
        return None

    # -- URL sets -------------------------------------------------------------------

    def content_locs(self) -> frozenset[Loc]:
        """Every page and catalogue page: what a complete crawl must fetch."""
        pages = (self.loc_of(n) for n in range(self.pages))
        return frozenset((*pages, *self.catalog_locs()))

    def expected_urls(self, port: int) -> frozenset[str]:
        """URLs of :meth:`content_locs` (redirect targets are pages, so included)."""
        return frozenset(self.loc_url(loc, port) for loc in self.content_locs())

    def problem_locs(self) -> Mapping[str, tuple[Loc, ...]]:
        """Linked problem resources by kind: ``not_found``, ``server_error``, ``slow``,
        ``redirect``, ``odd_file``; all empty without ``problems``."""
        return self._layout.problem_locs

    def problem_urls(self, port: int) -> frozenset[str]:
        """URLs of every linked problem resource, all kinds together."""
        return frozenset(
            self.loc_url(loc, port) for locs in self.problem_locs().values() for loc in locs
        )

    def problem_urls_by_kind(self, port: int) -> dict[str, frozenset[str]]:
        """URLs of the linked problem resources, by kind (see :meth:`problem_locs`)."""
        return {
            kind: frozenset(self.loc_url(loc, port) for loc in locs)
            for kind, locs in self.problem_locs().items()
        }

    def redirects(self, port: int) -> dict[str, str]:
        """Linked redirect URLs mapped to the canonical URL they lead to."""
        result = {}
        for loc in self.problem_locs()["redirect"]:
            target = self.redirect_target(loc)
            assert target is not None
            result[self.loc_url(loc, port)] = self.url(target, port)
        return result

    # -- archive --------------------------------------------------------------------

    @property
    def archive(self) -> Archive:
        """The date x category archive (falsy when not configured)."""
        assert self._layout.archive is not None
        return self._layout.archive

    def archive_units(self) -> list[Unit]:
        """Every unit ``(ISO date, category)``, by date, then category."""
        return self.archive.units()

    def archive_unit_url(self, unit: Unit, port: int) -> str:
        """The first listing page of ``unit``: where a crawl of the unit starts."""
        return self.loc_url((0, self.archive.listing_path(unit)), port)

    def archive_listing_urls(self, unit: Unit, port: int) -> list[str]:
        """Every listing page of ``unit``, in order (one for an empty unit)."""
        return [self.loc_url((0, path), port) for path in self.archive.listing_paths(unit)]

    def archive_doc_urls(self, unit: Unit, port: int) -> list[str]:
        """Every document of ``unit``, in order (none for an empty unit)."""
        return [self.loc_url((0, path), port) for path in self.archive.doc_paths(unit)]

    # -- internals ------------------------------------------------------------------

    def _check_page(self, n: int) -> None:
        if not 0 <= n < self.pages:
            raise ValueError(f"page must be between 0 and {self.pages - 1}, got {n}")

    def _link_to(self, source_host: int, loc: Loc, rng: random.Random) -> Link:
        forms = _SAME_HOST_FORMS if loc[0] == source_host else _CROSS_HOST_FORMS
        return Link(loc[0], loc[1], rng.choice(forms))

    def _plan(self) -> _Layout:
        rng = random.Random(self.seed)
        assert self.articles is not None
        non_roots = range(self.hosts, self.pages)
        articles = frozenset(rng.sample(non_roots, self.articles))
        encoded: dict[int, EncodingCase] = {}
        extra: dict[int, list[Link]] = {}
        kinds: dict[str, tuple[Loc, ...]] = {
            "not_found": (),
            "server_error": (),
            "slow": (),
            "redirect": (),
            "odd_file": (),
        }
        if not self.problems:
            return _Layout(articles, encoded, extra, kinds)
        products = [n for n in non_roots if n not in articles]
        chosen = rng.sample(products, min(len(products), len(_ENCODING_CASES)))
        for n, (codec, header, meta) in zip(sorted(chosen), _ENCODING_CASES, strict=False):
            title, description = text.NATIVE_SAMPLES[codec]
            encoded[n] = EncodingCase(n, codec, header, meta, f"{title} {n}", description)
        hosts = range(self.hosts)
        redirects = {
            (rng.randrange(self.hosts), f"/r/{rng.randrange(self.pages)}"): None
            for _ in range(max(1, self.pages // 40))
        }
        kinds["not_found"] = tuple((h, "/status/404") for h in hosts)
        kinds["server_error"] = tuple((h, "/status/500") for h in hosts)
        kinds["slow"] = ((rng.randrange(self.hosts), "/slow"),)
        kinds["redirect"] = tuple(redirects)
        kinds["odd_file"] = tuple((h, path) for h in hosts for path in ODD_FILES)
        for kind in ("not_found", "server_error", "slow", "redirect"):
            for loc in kinds[kind]:
                page = rng.randrange(self.pages)
                extra.setdefault(page, []).append(self._link_to(self.host_of(page), loc, rng))
        return _Layout(articles, encoded, extra, kinds)
