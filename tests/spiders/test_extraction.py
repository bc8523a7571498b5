"""Applying a spec to pages: item fields, keys, errors, roles, link rules, pagination,
and several item types per rule on the test site's saved pages."""

from __future__ import annotations

import datetime as dt
import functools
import json
from decimal import Decimal
from pathlib import Path

import pytest
from scrapy.http import HtmlResponse

from crawlfleet.spiders.extraction import PageRole, SpecExtractor
from crawlfleet.spiders.spec import Spec, load_spec
from crawlfleet.spiders.validation import SpecError
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.render import Resource, render_site
from tests.support.paths import EXAMPLES
from tests.support.specs import html_response, spec_from_text

BOOK_PAGE = """
<html><head><base href="http://books.example/shop/"></head><body>
<h1> The  Book
  of Things </h1>
<span id="isbn">ISBN 978-3-16</span>
<span class="price">Price: 1,299.50</span>
<span class="tag">poetry</span><span class="tag"> verse </span>
<time datetime="2024-05-09">9 May 2024</time>
<a class="cover" href="img/cover.png">cover</a>
</body></html>
"""

BOOK_SPEC = r"""
name: books
allowed_domains: [books.example]
start_item: book
items:
  book:
    key: isbn
    fields:
      title: {css: 'h1::text', required: true, processors: [normalize_space]}
      isbn: {xpath: '//span[@id="isbn"]/text()', re: 'ISBN ([\d-]+)'}
      price:
        css: '.price::text'
        re: '[\d,.]+'
        processors: [{replace: [',', '']}, decimal]
      tags: {css: '.tag::text', many: true, processors: [strip]}
      published: {css: 'time::attr(datetime)', processors: [date]}
      shown: {css: 'time::text', processors: [{date: '%d %B %Y'}]}
      cover: {css: 'a.cover::attr(href)', processors: [absolute_url]}
      stock: {css: '.stock::text', processors: [int], default: 0}
      subtitle: {css: 'h2::text'}
      reviews: {css: '.review::text', many: true}
"""


def extractor(tmp_path: Path, text: str, **kwargs: bool) -> SpecExtractor:
    return SpecExtractor(spec_from_text(tmp_path, text), **kwargs)


def test_fields_of_one_item(tmp_path: Path) -> None:
    ex = extractor(tmp_path, BOOK_SPEC)
    result = ex.process(html_response("http://books.example/b/1", BOOK_PAGE))
    assert result.role == PageRole(("book",))
    assert result.warnings == []
    (item,) = result.items
    assert list(item) == [
        "_type",
        "url",
        "_key",
        "title",
        "isbn",
        "price",
        "tags",
        "published",
        "shown",
        "cover",
        "stock",
        "subtitle",
        "reviews",
    ]
    assert item == {
        "_type": "book",
        "url": "http://books.example/b/1",
        "_key": "978-3-16",
        "title": "The Book of Things",
        "isbn": "978-3-16",
        "price": Decimal("1299.50"),
        "tags": ["poetry", "verse"],
        "published": dt.date(2024, 5, 9),
        "shown": dt.date(2024, 5, 9),
        "cover": "http://books.example/shop/img/cover.png",
        "stock": 0,
        "subtitle": None,
        "reviews": [],
    }


def test_empty_required_field_and_bad_values_are_marked(tmp_path: Path) -> None:
    ex = extractor(tmp_path, BOOK_SPEC)
    page = BOOK_PAGE.replace("<h1>", "<h2>").replace("</h1>", "</h2>")
    page = page.replace('datetime="2024-05-09"', 'datetime="soon"').replace(
        'id="isbn"', 'id="nothing"'
    )
    result = ex.process(html_response("http://books.example/b/2", page))
    (item,) = result.items
    assert item["title"] is None and item["published"] is None
    assert item["_key"] == "http://books.example/b/2"
    # only the empty required field makes the item invalid
    assert item["_errors"] == ["title: required field is empty"]
    assert item["_warnings"] == [
        "published: cannot read 'soon' as a date (ISO 8601)",
        "isbn: key field is empty; the page URL is the key",
    ]
    assert list(item)[-2:] == ["_errors", "_warnings"]
    assert result.warnings == [
        "http://books.example/b/2: book item 'http://books.example/b/2': "
        "title: required field is empty; published: cannot read 'soon' as a date "
        "(ISO 8601); isbn: key field is empty; the page URL is the key"
    ]


TABLE_PAGE = """
<html><body><table>
<tr class="row"><td class="sku">A1</td><td class="size">S</td><td class="n">3</td></tr>
<tr class="row"><td class="sku">A1</td><td class="size">M</td><td class="n">x</td></tr>
<tr class="row"><td class="sku"></td><td class="size">L</td><td class="n">1</td></tr>
</table></body></html>
"""


def test_each_yields_one_item_per_node_with_a_composite_key(tmp_path: Path) -> None:
    ex = extractor(
        tmp_path,
        """
        name: stock
        start_item: row
        items:
          row:
            each: {xpath: '//tr[@class="row"]'}
            key: [sku, size]
            fields:
              sku: {css: '.sku::text'}
              size: {xpath: './td[@class="size"]/text()'}
              count: {css: '.n::text', processors: [int]}
        """,
    )
    result = ex.process(html_response("http://shop.example/stock", TABLE_PAGE))
    assert [(i["_key"], i["count"], i.get("_warnings")) for i in result.items] == [
        ('["A1", "S"]', 3, None),
        ('["A1", "M"]', None, ["count: cannot convert 'x' to int"]),
        ("http://shop.example/stock", 1, ["sku: key field is empty; the page URL is the key"]),
    ]
    assert not any("_errors" in i for i in result.items)
    assert json.loads(result.items[0]["_key"]) == ["A1", "S"]
    empty = ex.process(html_response("http://shop.example/none", "<html></html>"))
    assert empty.items == []
    assert empty.warnings == ["http://shop.example/none: no 'row' items: 'each' matched nothing"]


def test_match_skips_pages_of_another_kind_and_auto_article(tmp_path: Path) -> None:
    ex = extractor(
        tmp_path,
        """
        name: news
        start_item: article
        items:
          article:
            auto: article
            match: {css: article.post}
        """,
    )
    page = "<html><body><article class='post'><h1>Hi</h1><p>Text</p></article></body></html>"
    result = ex.process(html_response("http://news.example/a/1", page))
    assert result.items == [
        {
            "_type": "article",
            "url": "http://news.example/a/1",
            "_key": "http://news.example/a/1",
            "_auto": "article",
            "_html": page,
            "_encoding": "utf-8",
        }
    ]
    other = ex.process(html_response("http://news.example/shop", "<html><p>x</p></html>"))
    assert other.unmatched and other.items == [] and other.warnings == []


# -- roles ------------------------------------------------------------------------------

ROLE_SPEC = r"""
name: books
allowed_domains: [books.example]
start_item: listing
links:
  - allow: '/tag/'
  - allow: '/book/\d+$'
    deny: '/book/0$'
    item: book
  - allow: '/author/'
    item: author
    follow: true
items:
  book: {fields: {t: {css: 'h1::text'}}}
  author: {fields: {n: {css: 'h1::text'}}}
  listing: {fields: {t: {css: 'title::text'}}}
"""


@pytest.mark.parametrize(
    ("url", "meta", "role"),
    [
        ("http://books.example/book/1", None, PageRole(("book",), follow=False)),
        ("http://www.books.example/book/1", None, PageRole(("book",), follow=False)),
        ("http://books.example/book/0", None, PageRole(("listing",))),
        ("http://books.example/author/7", None, PageRole(("author",), follow=True)),
        ("http://books.example/tag/x", None, PageRole(("listing",))),
        ("http://elsewhere.example/book/1", None, PageRole(("listing",))),
        (
            "http://books.example/book/1",
            {"spec_item": None, "spec_follow": True, "spec_depth": 2, "spec_page": 3},
            PageRole(follow=True, depth=2, page=3),
        ),
        (
            "http://books.example/x",
            {"spec_item": "author", "spec_follow": False, "spec_depth": 1},
            PageRole(("author",), follow=False, depth=1),
        ),
        ("http://books.example/x", {"spec_item": "gone"}, PageRole()),
    ],
)
def test_role_for(tmp_path: Path, url: str, meta: dict[str, object] | None, role: PageRole) -> None:
    assert extractor(tmp_path, ROLE_SPEC).role_for(url, meta) == role


def test_role_travels_in_request_meta(tmp_path: Path) -> None:
    ex = extractor(tmp_path, ROLE_SPEC)
    role = PageRole(("author",), follow=False, depth=4, page=2)
    response = html_response("http://books.example/b", "<html></html>", meta=role.meta())
    assert ex.process(response).role == role


# -- links ------------------------------------------------------------------------------

LIST_PAGE = """
<html><body>
<nav class="menu"><a href="/">Home</a> <a href="/about">About</a></nav>
<div class="list">
  <a href="/book/1">One</a>
  <a href="book/2?ref=x">Two</a>
  <a href="/list/book/2?ref=x#top">Two again</a>
  <a href="/tag/poetry">Poetry</a>
  <a href="http://other.example/book/9">Elsewhere</a>
  <a href="/book/3/print">Print</a>
  <a href="/book/0">Zero</a>
</div>
<div class="side"><a href="/book/4">Four</a> <a href="/author/1">Author</a></div>
<a class="next" href="?page=2">Next</a>
<a class="next" href="http://other.example/?page=2">Mirror</a>
</body></html>
"""

LINK_SPEC = r"""
name: books
allowed_domains: [books.example]
links:
  - allow: '/book/\d+'
    deny: ['/print$', '/book/0']
    restrict_css: div.list
    item: book
  - restrict_xpath: '//div[@class="side"]'
    item: author
    max_depth: 1
  - allow: '/tag/'
pagination: {css: a.next, max_pages: 3}
items:
  book: {fields: {t: {css: 'h1::text'}}}
  author: {fields: {n: {css: 'h1::text'}}}
"""


def links_of(spec_or_ex: SpecExtractor, role: PageRole) -> list[tuple[str, str, object]]:
    response = html_response("http://books.example/list/", LIST_PAGE)
    return [
        (link.kind, link.url, link.role.item if link.kind == "link" else link.role.page)
        for link in spec_or_ex.links(response, role)
    ]


def test_link_rules_allow_deny_restrict_and_domains(tmp_path: Path) -> None:
    ex = extractor(tmp_path, LINK_SPEC)
    assert links_of(ex, PageRole()) == [
        ("link", "http://books.example/book/1", "book"),
        ("link", "http://books.example/list/book/2?ref=x", "book"),
        ("link", "http://books.example/book/4", "author"),
        ("link", "http://books.example/author/1", "author"),
        ("link", "http://books.example/tag/poetry", None),
        ("next", "http://books.example/list/?page=2", 2),
    ]
    links = ex.links(html_response("http://books.example/list/", LIST_PAGE), PageRole())
    assert [(link.rule, link.role.follow, link.role.depth) for link in links[:5]] == [
        (0, False, 1),
        (0, False, 1),
        (1, False, 1),
        (1, False, 1),
        (2, True, 1),
    ]


def test_depth_limits(tmp_path: Path) -> None:
    ex = extractor(tmp_path, LINK_SPEC)
    # the author rule stops at depth 1: from a depth-1 page its links would be depth 2
    assert [u for _, u, _ in links_of(ex, PageRole(depth=1))] == [
        "http://books.example/book/1",
        "http://books.example/list/book/2?ref=x",
        "http://books.example/tag/poetry",
        "http://books.example/list/?page=2",
    ]
    capped = extractor(
        tmp_path, LINK_SPEC.replace("allowed_domains:", "max_depth: 2\nallowed_domains:")
    )
    assert links_of(capped, PageRole(depth=2)) == [("next", "http://books.example/list/?page=2", 2)]


def test_follow_false_keeps_pagination_and_max_pages_stops_it(tmp_path: Path) -> None:
    ex = extractor(tmp_path, LINK_SPEC)
    assert links_of(ex, PageRole(("book",), follow=False, depth=1, page=2)) == [
        ("next", "http://books.example/list/?page=2", 3)
    ]
    next_link = ex.links(
        html_response("http://books.example/list/", LIST_PAGE),
        PageRole(("book",), follow=False, depth=1, page=2),
    )[0]
    assert next_link.role == PageRole(("book",), follow=False, depth=1, page=3)
    assert links_of(ex, PageRole(follow=False, page=3)) == []


def test_without_domain_check_every_link_counts(tmp_path: Path) -> None:
    ex = extractor(tmp_path, LINK_SPEC, check_domains=False)
    urls = [u for _, u, _ in links_of(ex, PageRole())]
    assert "http://other.example/book/9" in urls
    assert "http://other.example/?page=2" in urls


def test_pagination_by_xpath_attribute(tmp_path: Path) -> None:
    spec: Spec = spec_from_text(
        tmp_path,
        """
        name: p
        start_item: a
        pagination: {xpath: '//a[@class="next"][1]/@href'}
        items: {a: {auto: article}}
        """,
    )
    assert links_of(SpecExtractor(spec), PageRole(("a",), page=9)) == [
        ("next", "http://books.example/list/?page=2", 10)
    ]


def test_next_page_wins_over_a_link_rule(tmp_path: Path) -> None:
    ex = extractor(
        tmp_path,
        """
        name: p
        start_item: a
        links: [{allow: '/list/'}]
        pagination: {css: a.next}
        items: {a: {auto: article}}
        """,
    )
    links = ex.links(html_response("http://books.example/list/", LIST_PAGE), PageRole(("a",)))
    assert [(link.kind, link.url) for link in links if "/list/" in link.url] == [
        ("link", "http://books.example/list/book/2?ref=x"),
        ("next", "http://books.example/list/?page=2"),
    ]
    assert links[-1].role == PageRole(("a",), page=2)


# -- several item types per rule: the bundled test site's saved pages -------------------

SITE = SiteModel(pages=30, hosts=3, problems=False)
PORT = 8080
FULL_SITE = EXAMPLES / "testsite.yaml"


@functools.cache
def rendered_site() -> dict[tuple[int, str], Resource]:
    return render_site(SITE, PORT)


def saved_page(loc: tuple[int, str], meta: dict[str, object] | None = None) -> HtmlResponse:
    """The test site's page at *loc*, as saved (and fetched with *meta*, if given)."""
    body = rendered_site()[loc].body.decode("utf-8")
    return html_response(SITE.loc_url(loc, PORT), body, meta)


def test_one_rule_yields_products_and_articles_under_the_same_urls() -> None:
    ex = SpecExtractor(load_spec(FULL_SITE))
    product_n = next(n for n in range(SITE.hosts, SITE.pages) if not SITE.is_article(n))
    article_n = min(SITE.article_ids)
    both = PageRole(("product", "article"), follow=True)

    product = ex.process(saved_page(SITE.loc_of(product_n)))
    assert product.role == both and product.item_type == "product"
    assert not product.unmatched and product.warnings == []
    (item,) = product.items
    expected = SITE.product(product_n)
    assert item == {
        "_type": "product",
        "url": SITE.url(product_n, PORT),
        "_key": expected.sku,
        "title": expected.title,
        "price": Decimal(expected.price),
        "currency": "EUR",
        "sku": expected.sku,
        "listed": dt.date.fromisoformat(expected.date),
        "description": expected.description,
    }

    article = ex.process(saved_page(SITE.loc_of(article_n)))
    assert article.role == both and article.item_type == "article"
    (item,) = article.items
    assert (item["_type"], item["_key"], item["_auto"]) == (
        "article",
        SITE.url(article_n, PORT),
        "article",
    )
    assert SITE.article(article_n).headline in item["_html"]

    root = ex.process(saved_page(SITE.loc_of(1)))  # a start URL: start_item is the same list
    assert [i["_key"] for i in root.items] == [SITE.product(1).sku]


def test_a_page_no_listed_type_matches_yields_nothing_and_leads_on() -> None:
    ex = SpecExtractor(load_spec(FULL_SITE))
    catalog = ex.process(saved_page((0, "/catalog?page=1")))
    assert catalog.unmatched and catalog.item_type is None
    assert catalog.items == [] and catalog.warnings == []
    # the links carry the whole list; a page fetched with that meta chooses its own type
    article_n = min(n for n in SITE.article_ids if SITE.host_of(n) == 0)
    link = next(link for link in catalog.links if link.url == SITE.url(article_n, PORT))
    assert link.role == PageRole(("product", "article"), follow=True, depth=1)
    meta = link.role.meta()
    assert meta["spec_item"] == ["product", "article"]
    assert json.loads(json.dumps(meta)) == meta
    fetched = ex.process(saved_page(SITE.loc_of(article_n), meta))
    assert fetched.role == link.role
    assert [i["_type"] for i in fetched.items] == ["article"]


def test_a_type_without_match_last_takes_the_rest(tmp_path: Path) -> None:
    ex = extractor(
        tmp_path,
        """
        name: s
        start_item: [article, product, page]
        items:
          product: {match: {css: div.product}, fields: {sku: {css: 'span.sku::text'}}}
          article: {auto: article, match: {xpath: '//article'}}
          page: {fields: {heading: {css: 'h1::text'}}}
        """,
    )
    assert ex.process(saved_page(SITE.loc_of(0))).item_type == "product"
    assert ex.process(saved_page(SITE.loc_of(min(SITE.article_ids)))).item_type == "article"
    catalog = ex.process(saved_page((0, "/catalog?page=1")))
    assert not catalog.unmatched
    assert [(i["_type"], i["heading"]) for i in catalog.items] == [
        ("page", "Catalogue, page 1 of 1")
    ]
    # forcing one type (crawlfleet extract --item) tries that type only
    forced = ex.process(saved_page((0, "/catalog?page=1")), item="product")
    assert forced.role.item_types == ("product",) and forced.unmatched


@pytest.mark.parametrize(
    ("raw", "types"),
    [
        (None, ()),
        ("book", ("book",)),
        (["author", "book"], ("author", "book")),
        (["gone", "book", 5], ("book",)),
        (["gone"], ()),
        ({"book": 1}, ()),
    ],
)
def test_item_types_from_meta(tmp_path: Path, raw: object, types: tuple[str, ...]) -> None:
    role = extractor(tmp_path, ROLE_SPEC).role_for("http://books.example/x", {"spec_item": raw})
    assert role.item_types == types


def test_role_meta_and_display() -> None:
    assert PageRole().meta()["spec_item"] is None and PageRole().item is None
    assert PageRole(("a",)).meta()["spec_item"] == "a" and PageRole(("a",)).item == "a"
    several = PageRole(("a", "b"))
    assert several.meta()["spec_item"] == ["a", "b"] and several.item == "a|b"


FILES_PAGE = """<html><body>
<a href="/page">page</a> <a href="/logo.svg">logo</a> <a href="/tool.py">tool</a>
<a href="/paper.PDF">paper</a>
</body></html>"""


@pytest.mark.parametrize(
    ("keys", "followed"),
    [
        ("", ["/page"]),  # Scrapy's default list skips svg, py and pdf
        ("allow_extensions: [svg, .py]", ["/page", "/logo.svg", "/tool.py"]),
        ("deny_extensions: []", ["/page", "/logo.svg", "/tool.py", "/paper.PDF"]),
        ("deny_extensions: pdf", ["/page", "/logo.svg", "/tool.py"]),
        (
            "deny_extensions: [pdf, svg]\n    allow_extensions: pdf",
            ["/page", "/tool.py", "/paper.PDF"],
        ),
    ],
)
def test_link_rules_choose_the_file_extensions_they_skip(
    tmp_path: Path, keys: str, followed: list[str]
) -> None:
    spec = (
        "name: files\nstart_urls: ['http://f.example/']\nitems: {i: {fields: {t: {css: h1}}}}\n"
        f"links:\n  - allow: '.'\n    {keys}\n"
    )
    ex = extractor(tmp_path, spec)
    links = ex.links(html_response("http://f.example/", FILES_PAGE), PageRole())
    assert [link.url.removeprefix("http://f.example") for link in links] == followed


def test_extension_keys_are_validated(tmp_path: Path) -> None:
    bad = "name: x\nstart_urls: [u]\nitems: {i: {fields: {t: {css: h1}}}}\nlinks:\n"
    with pytest.raises(SpecError, match=r"links\[0\]\.deny_extensions"):
        spec_from_text(tmp_path, bad + "  - deny_extensions: ['a/b']\n")
