"""HTML (and the odd files) of a :class:`~crawlfleet.testsite.model.SiteModel`, rendered
once for a port so that the server only looks bodies up.

Selectors a scraper can rely on:

- product pages (roots included): ``div.product[data-page]`` holding ``h1.title``,
  ``span.price`` (decimal string), ``span.currency``, ``span.sku``,
  ``time[datetime]`` (ISO date; text is the human form), ``div.description``;
  body links in ``section.see-also``, a root's in ``section.featured`` and
  ``section.files`` too;
- article pages: ``article.post[data-page]`` holding ``h1.headline``, ``span.author``,
  ``time[datetime]`` and ``div.article-body`` (the main text, one ``<p>`` per
  paragraph); boilerplate around it: ``div.cookie-banner``, ``nav.menu``,
  ``aside.sidebar``, ``section.related`` (the body links) and ``footer``;
- on a changing site (:mod:`crawlfleet.testsite.changing`), product and article blocks
  also hold ``time.updated[datetime]`` (ISO time; after the other ``time``);
- catalogue pages: ``ol.catalog`` entries, ``a[rel=prev]``, ``a[rel=next]``.

Every page has ``nav.menu`` (root, catalogue) and ``footer.site-footer``.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from html import escape

from crawlfleet.testsite.model import (
    CATALOG_PAGE_SIZE,
    Article,
    Link,
    Loc,
    Product,
    SiteModel,
    host_address,
)

__all__ = [
    "Resource",
    "href",
    "page_resource",
    "relative_path",
    "render_page_text",
    "render_site",
]

_SITE_NAME = "Crawlfleet Test Store"
_FOOTER = (
    '<footer class="site-footer">\n'
    f"<p>Copyright 2024 {_SITE_NAME}. All rights reserved.</p>\n"
    "<p>Prices include VAT. Delivery within three to five working days. Returns are free "
    "for thirty days.</p>\n"
    "<p>Customer service: Monday to Friday, nine to five.</p>\n"
    "</footer>\n"
)
_COOKIE_BANNER = (
    '<div class="cookie-banner" role="dialog">\n'
    "<p>We use cookies to improve your experience and to measure traffic. By continuing "
    "to browse this site you accept our cookie policy.</p>\n"
    '<button type="button">Accept all cookies</button>\n'
    "</div>\n"
)
_SIDEBAR_TEXT = (
    "<h2>Newsletter</h2>\n"
    "<p>Sign up for our weekly newsletter and never miss a story. No spam, unsubscribe at "
    "any time.</p>\n"
    "<h2>Popular topics</h2>\n"
    "<ul><li>Harbours</li><li>Engines</li><li>Gardens</li><li>Libraries</li></ul>\n"
)


@dataclass(frozen=True)
class Resource:
    """A pre-rendered response: status, Content-Type and body bytes."""

    status: int
    content_type: str
    body: bytes


def relative_path(source: str, target: str) -> str:
    """A path-relative reference from ``source`` to ``target`` (both absolute paths);
    ``urljoin(source, result) == target``."""
    source_path = source.partition("?")[0]
    directory = source_path[: source_path.rfind("/") + 1]
    if target.startswith(directory):
        rest = target[len(directory) :]
        first = rest.partition("/")[0]
        if not rest or rest.startswith("?") or ":" in first:
            return "./" + rest
        return rest
    return "../" * (directory.count("/") - 1) + target[1:]


def href(link: Link, source: Loc, port: int) -> str:
    """How ``link`` is written on the page at ``source``, per its ``form``."""
    if link.form == "absolute" or (link.host != source[0] and link.form != "scheme-relative"):
        ref = f"http://{host_address(link.host)}:{port}{link.path}"
    elif link.form == "scheme-relative":
        ref = f"//{host_address(link.host)}:{port}{link.path}"
    elif link.form == "root-relative":
        ref = link.path
    elif link.form == "query" and link.path.partition("?")[0] == source[1].partition("?")[0]:
        ref = "?" + link.path.partition("?")[2]
    else:
        ref = relative_path(source[1], link.path)
    return ref + link.fragment


def _anchor_text(model: SiteModel, link: Link) -> str:
    n = model.page_at(link.loc)
    if n is None:
        return link.path
    return f"Story {n}" if model.is_article(n) else f"Item {n}"


def _link_list(model: SiteModel, links: tuple[Link, ...], source: Loc, port: int) -> str:
    return "".join(
        f'<li><a href="{escape(href(link, source, port))}">'
        f"{escape(_anchor_text(model, link))}</a></li>\n"
        for link in links
    )


def _head(title: str, meta_charset: str | None) -> str:
    meta = f'<meta charset="{meta_charset}">\n' if meta_charset else ""
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n'
        f"{meta}<title>{escape(title)} - {_SITE_NAME}</title>\n</head>\n<body>\n"
    )


def _menu(model: SiteModel, source: Loc, port: int) -> str:
    links = model.nav_links(source[0])
    labels = ("Home", "Catalogue", *(_anchor_text(model, link) for link in links[2:]))
    items = "".join(
        f'<li><a href="{escape(href(link, source, port))}">{escape(label)}</a></li>'
        for link, label in zip(links, labels, strict=True)
    )
    return f'<header class="site-header">\n<nav class="menu"><ul>{items}</ul></nav>\n</header>\n'


def _updated(updated: tuple[str, str] | None) -> str:
    """The ``updated_at`` line of a changing page (``(ISO time, human form)``)."""
    if updated is None:
        return ""
    iso, human = updated
    return f'<p class="updated">Updated <time class="updated" datetime="{iso}">{human}</time></p>\n'


def _product_html(
    model: SiteModel,
    n: int,
    port: int,
    meta_charset: str | None,
    item: Product | None = None,
    updated: tuple[str, str] | None = None,
) -> str:
    item = item if item is not None else model.product(n)
    source = model.loc_of(n)
    parts = [
        _head(item.title, meta_charset),
        _menu(model, source, port),
        "<main>\n",
        f'<div class="product" itemscope itemtype="https://schema.org/Product" data-page="{n}">\n',
        f'<h1 class="title" itemprop="name">{escape(item.title)}</h1>\n',
        f'<p class="offer">Price: <span class="price" itemprop="price">{item.price}</span> '
        '<span class="currency" itemprop="priceCurrency">EUR</span></p>\n',
        f'<p class="sku-line">SKU: <span class="sku" itemprop="sku">{item.sku}</span></p>\n',
        f'<p class="listed">Listed on <time datetime="{item.date}">{item.date_human}</time></p>\n',
        '<div class="description" itemprop="description">\n'
        f"<p>{escape(item.description)}</p>\n</div>\n",
        _updated(updated),
        "</div>\n",
    ]
    featured = model.featured_links(n)
    if featured:
        parts.append('<section class="featured"><h2>Featured</h2>\n<ul>\n')
        parts += [_link_list(model, featured, source, port), "</ul></section>\n"]
    files = model.file_links(n)
    if files:
        parts.append('<section class="files"><h2>Downloads</h2>\n<ul>\n')
        parts += [_link_list(model, files, source, port), "</ul></section>\n"]
    parts += [
        '<section class="see-also"><h2>See also</h2>\n<ul>\n',
        _link_list(model, model.page_links(n), source, port),
        "</ul></section>\n</main>\n",
        _FOOTER,
        "</body>\n</html>\n",
    ]
    return "".join(parts)


def _article_html(
    model: SiteModel,
    n: int,
    port: int,
    item: Article | None = None,
    updated: tuple[str, str] | None = None,
) -> str:
    item = item if item is not None else model.article(n)
    source = model.loc_of(n)
    body = "".join(f"<p>{escape(p)}</p>\n" for p in item.paragraphs)
    return "".join(
        [
            _head(item.headline, "utf-8"),
            _COOKIE_BANNER,
            _menu(model, source, port),
            '<div class="layout">\n<aside class="sidebar">\n',
            _SIDEBAR_TEXT,
            "</aside>\n<main>\n",
            f'<article class="post" data-page="{n}">\n',
            f'<h1 class="headline">{escape(item.headline)}</h1>\n',
            f'<p class="byline">By <span class="author">{escape(item.author)}</span>, '
            f'<time datetime="{item.date}">{item.date_human}</time></p>\n',
            f'<div class="article-body">\n{body}</div>\n',
            _updated(updated),
            "</article>\n",
            '<section class="related"><h2>Related links</h2>\n<ul>\n',
            _link_list(model, model.page_links(n), source, port),
            "</ul></section>\n</main>\n</div>\n",
            _FOOTER,
            "</body>\n</html>\n",
        ]
    )


def render_page_text(
    model: SiteModel,
    n: int,
    port: int,
    *,
    item: Product | Article | None = None,
    updated: tuple[str, str] | None = None,
) -> str:
    """The HTML of page ``n`` as text, before encoding. A changing site passes the
    version's ``item`` (default: the model's) and ``updated``, ``(ISO time, human
    form)`` of its ``time.updated`` (default: none)."""
    if model.is_article(n):
        article = item if isinstance(item, Article) else None
        return _article_html(model, n, port, article, updated)
    case = model.encoded_pages.get(n)
    product = item if isinstance(item, Product) else None
    meta = "utf-8" if case is None else case.meta_charset
    return _product_html(model, n, port, meta, product, updated)


def page_resource(model: SiteModel, n: int, html: str) -> Resource:
    """Page ``n``'s rendered ``html`` as a response, in its codec."""
    case = model.encoded_pages.get(n)
    if case is None:
        return Resource(200, "text/html; charset=utf-8", html.encode("utf-8"))
    return Resource(200, case.content_type, html.encode(case.codec))


def _catalog_html(model: SiteModel, host: int, k: int, port: int) -> str:
    source = (host, f"/catalog?page={k}")
    links = model.catalog_links(host, k)
    entries = len(model.catalog_entries(host, k))
    pager = []
    for link in links[entries:]:
        rel = "next" if link.form == "query" else "prev"
        label = "Next page" if rel == "next" else "Previous page"
        pager.append(f'<a rel="{rel}" href="{escape(href(link, source, port))}">{label}</a>')
    start = (k - 1) * CATALOG_PAGE_SIZE + 1
    return "".join(
        [
            _head(f"Catalogue, page {k}", "utf-8"),
            _menu(model, source, port),
            f'<main>\n<h1 class="catalog-title">Catalogue, page {k} of '
            f"{model.catalog_page_count(host)}</h1>\n",
            f'<ol class="catalog" start="{start}">\n',
            _link_list(model, links[:entries], source, port),
            "</ol>\n",
            f'<nav class="pagination">{" ".join(pager)}</nav>\n</main>\n',
            _FOOTER,
            "</body>\n</html>\n",
        ]
    )


def _png() -> bytes:
    """A valid 1x1 grey PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        payload = kind + data
        return struct.pack(">I", len(data)) + payload + struct.pack(">I", zlib.crc32(payload))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00\x80"))
        + chunk(b"IEND", b"")
    )


def render_site(model: SiteModel, port: int) -> dict[Loc, Resource]:
    """Every static resource of the site for ``port``: pages, catalogues, odd files.

    Dynamic resources (``/status/*``, ``/slow``, ``/r/*``, ``robots.txt``) are the
    server's. Raises ``UnicodeEncodeError`` if a page cannot be encoded in its codec.
    """
    site: dict[Loc, Resource] = {}
    for n in range(model.pages):
        site[model.loc_of(n)] = page_resource(model, n, render_page_text(model, n, port))
    for host, path in model.catalog_locs():
        k = int(path.partition("=")[2])
        body = _catalog_html(model, host, k, port).encode("utf-8")
        site[(host, path)] = Resource(200, "text/html; charset=utf-8", body)
    png = _png()
    for host in range(model.hosts):
        first = range(host, model.pages, model.hosts)[:5]
        feed = {"host": host_address(host), "pages": [model.url(m, port) for m in first]}
        site[(host, "/feed.json")] = Resource(200, "application/json", json.dumps(feed).encode())
        site[(host, "/logo.png")] = Resource(200, "image/png", png)
    return site
