"""SpecSpider without an engine: construction, settings, start requests, parse output."""

from __future__ import annotations

import asyncio
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.settings import Settings

from crawlfleet.exceptions import ConfigError
from crawlfleet.pipelines.validate import ValidatePipeline
from crawlfleet.spiders import SpecSpider, load_spec
from tests.support.specs import html_response, write_spec

SPEC = r"""
name: shop-books
start_urls: [http://shop.example/list]
allowed_domains: [shop.example]
request:
  headers: {Accept-Language: de}
  cookies: false
  meta: {download_timeout: 7}
settings: {DOWNLOAD_DELAY: 0.25, CONCURRENT_REQUESTS_PER_DOMAIN: 3}
links:
  - allow: '/book/\d+'
    item: book
pagination: {css: a.next}
items:
  book:
    fields:
      title: {css: 'h1::text', required: true}
"""


def start_requests(spider: SpecSpider) -> list[Request]:
    async def collect() -> list[Any]:
        return [request async for request in spider.start()]

    return asyncio.run(collect())


def test_spec_argument(tmp_path: Path) -> None:
    spider = SpecSpider(spec=str(write_spec(tmp_path, SPEC)))
    assert spider.name == "shop-books"
    assert spider.allowed_domains == ["shop.example"]
    assert spider.start_urls == ["http://shop.example/list"]
    (request,) = start_requests(spider)
    assert request.url == "http://shop.example/list"
    # start requests go through the duplicate filter: a later link back is not refetched
    assert not request.dont_filter
    assert request.headers["Accept-Language"] == b"de"
    assert request.meta == {
        "download_timeout": 7,
        "spec_item": None,
        "spec_follow": True,
        "spec_depth": 0,
        "spec_page": 1,
        "dont_merge_cookies": True,
    }


def test_start_urls_argument_overrides_the_spec(tmp_path: Path) -> None:
    path = write_spec(tmp_path, SPEC)
    spider = SpecSpider(spec=path, start_urls="http://shop.example/a, http://shop.example/b")
    assert spider.start_urls == ["http://shop.example/a", "http://shop.example/b"]
    assert SpecSpider(spec=path, start_urls=[]).start_urls == []


def test_allowed_domains_argument_overrides_the_spec_for_links_too(tmp_path: Path) -> None:
    path = write_spec(tmp_path, SPEC)
    spider = SpecSpider(spec=path, allowed_domains="shop.example, other.example")
    assert spider.allowed_domains == ["shop.example", "other.example"]
    assert spider.extractor.spec.allowed_domains == ("shop.example", "other.example")
    assert SpecSpider(spec=path).allowed_domains == list(SpecSpider(spec=path).spec.allowed_domains)


def test_spec_settings_apply_at_spider_priority(tmp_path: Path) -> None:
    crawler = Crawler(SpecSpider, Settings({"DOWNLOAD_DELAY": 5}))
    spider = SpecSpider.from_crawler(crawler, spec=write_spec(tmp_path, SPEC))
    assert spider.name == "shop-books"
    assert crawler.settings.getfloat("DOWNLOAD_DELAY") == 0.25
    assert crawler.settings.getpriority("DOWNLOAD_DELAY") == 30  # "spider"
    assert crawler.settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN") == 3


def test_subclass_with_spec_path_relative_to_its_module(tmp_path: Path) -> None:
    write_spec(tmp_path, SPEC, "books.yaml")
    module = types.ModuleType("shop_spiders_for_test")
    module.__file__ = str(tmp_path / "shop_spiders_for_test.py")
    sys.modules[module.__name__] = module
    try:
        namespace = {"__module__": module.__name__, "spec_path": "books.yaml"}
        cls: type[SpecSpider] = type("BooksSpider", (SpecSpider,), namespace)
    finally:
        del sys.modules[module.__name__]
    assert cls.name == "shop-books"
    assert cls.custom_settings == {
        "METAREFRESH_ENABLED": False,  # the spider follows meta refreshes itself
        "DOWNLOAD_DELAY": 0.25,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 3,
    }
    assert cls().start_urls == ["http://shop.example/list"]


def test_invalid_spec_stops_class_definition(tmp_path: Path) -> None:
    path = write_spec(tmp_path, "name: s\nitems: {}\n")
    with pytest.raises(ConfigError, match=r"spec.yaml:2: items: must have at least 1 key"):
        type("Broken", (SpecSpider,), {"spec_path": str(path)})


def test_from_spec_names_a_subclass(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path, SPEC))
    cls = SpecSpider.from_spec(spec, module=__name__)
    assert cls.__name__ == "ShopBooksSpider"
    assert cls.__module__ == __name__
    assert cls.name == "shop-books" and cls.default_spec is spec
    assert cls().spec is spec


def test_spider_needs_a_spec() -> None:
    with pytest.raises(ConfigError, match="SpecSpider needs a spec: set spec_path"):
        SpecSpider()


def test_parse_yields_items_then_requests(tmp_path: Path) -> None:
    spider = SpecSpider(spec=write_spec(tmp_path, SPEC))
    listing = html_response(
        "http://shop.example/list",
        '<a href="/book/1">b</a><a href="/about">x</a><a class="next" href="?p=2">n</a>',
        meta={"spec_item": None, "spec_follow": True, "spec_depth": 0, "spec_page": 1},
    )
    out = list(spider.parse(listing))
    assert all(isinstance(r, Request) for r in out)
    assert [(r.url, r.meta["spec_item"], r.meta["spec_page"]) for r in out] == [
        ("http://shop.example/book/1", "book", 1),
        ("http://shop.example/list?p=2", None, 2),
    ]
    assert out[0].callback == spider.parse and not out[0].dont_filter
    assert out[0].meta["dont_merge_cookies"] is True
    # a seed from the frontier (no spec meta) is placed by URL
    book = html_response("http://shop.example/book/1", "<h1>Title</h1>")
    assert list(spider.parse(book)) == [
        {
            "_type": "book",
            "url": "http://shop.example/book/1",
            "_key": "http://shop.example/book/1",
            "title": "Title",
        }
    ]


def test_parse_warns_about_empty_required_fields(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spider = SpecSpider(spec=write_spec(tmp_path, SPEC))
    (item,) = spider.parse(html_response("http://shop.example/book/2", "<p>no title</p>"))
    assert item["_errors"] == ["title: required field is empty"]
    assert "_warnings" not in item
    assert [p.reason for p in ValidatePipeline().problems(item)] == ["missing_field"]
    assert "title: required field is empty" in caplog.text


MIXED = r"""
name: mixed
start_urls: [http://mixed.example/]
start_item: [product, article]
links:
  - allow: '/p/\d+'
    item: [product, article]
items:
  product:
    match: {css: div.product}
    key: sku
    fields:
      sku: {css: '.sku::text'}
      price: {css: '.price::text', processors: [decimal]}
  article:
    auto: article
    match: {css: article}
"""


def test_several_item_types_travel_in_meta_and_pick_per_page(tmp_path: Path) -> None:
    spider = SpecSpider(spec=write_spec(tmp_path, MIXED))
    (start,) = start_requests(spider)
    assert start.meta["spec_item"] == ["product", "article"]
    (link,) = spider.parse(html_response("http://mixed.example/", '<a href="/p/2">x</a>'))
    assert isinstance(link, Request) and link.meta["spec_item"] == ["product", "article"]
    product = '<div class="product"><span class="sku">S1</span><span class="price">x</span></div>'
    (item,) = spider.parse(html_response(link.url, product, meta=link.meta))
    assert (item["_type"], item["_key"]) == ("product", "S1")
    # a value that cannot be converted is a warning: the item stays valid
    assert item["_warnings"] == ["price: cannot convert 'x' to decimal"]
    assert "_errors" not in item
    assert ValidatePipeline().problems(item) == []
    (item,) = spider.parse(html_response(link.url, "<article>Hi</article>", meta=link.meta))
    assert item["_type"] == "article"
    assert list(spider.parse(html_response(link.url, "<p>gone</p>", meta=link.meta))) == []


REFRESH_SPEC = """
name: refresh
start_urls: ['http://r.example/']
{mode}
links:
  - allow: '/(go|p)/'
    item: page
items:
  page: {{fields: {{title: {{css: 'h1::text'}}}}}}
"""
REFRESH_PAGE = """<html><head><meta http-equiv="refresh" content="0; url=/p/1"></head>
<body><h1>Moved</h1><a href="/p/2">other</a></body></html>"""


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("", ["request /p/1 page"]),  # follow: the target takes the page's place
        # item: the page's own item too (its links are not followed: an item rule)
        ("meta_refresh: item", ["request /p/1 page", "item Moved"]),
        ("meta_refresh: ignore", ["item Moved"]),
    ],
)
def test_meta_refresh_is_followed_with_the_pages_role(
    tmp_path: Path, mode: str, expected: list[str]
) -> None:
    spider = SpecSpider(spec=write_spec(tmp_path, REFRESH_SPEC.format(mode=mode)))
    assert SpecSpider.custom_settings == {"METAREFRESH_ENABLED": False}  # ours, not Scrapy's
    reached = spider._request(
        "http://r.example/go/1", spider.extractor.role_for("http://r.example/go/1", {})
    )
    response = html_response("http://r.example/go/1", REFRESH_PAGE, meta=reached.meta)
    seen = []
    for out in spider.parse(response):
        if isinstance(out, Request):
            role = spider.extractor.role_for(out.url, out.meta)
            seen.append(f"request {out.url.removeprefix('http://r.example')} {role.item_types[0]}")
        else:
            seen.append(f"item {out['title']}")
    assert seen == expected
