"""``crawlfleet validate`` and ``crawlfleet extract``, called through their ``run()``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from crawlfleet.cli import extract, validate
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.render import render_page_text
from crawlfleet.testsite.server import TestSite
from tests.support.paths import EXAMPLES
from tests.support.specs import write_spec

CATALOG = EXAMPLES / "testsite_catalog.yaml"
ARTICLES = EXAMPLES / "testsite_articles.yaml"
FULL_SITE = EXAMPLES / "testsite.yaml"
MODEL = SiteModel(pages=45, hosts=1, problems=False)


def call(module: ModuleType, *argv: str) -> int:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    status: int = module.run(parser.parse_args(list(argv)))
    return status


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    with TestSite(MODEL) as running:
        yield running


# -- validate ---------------------------------------------------------------------------


def test_validate_valid_specs(capsys: pytest.CaptureFixture[str]) -> None:
    assert call(validate, str(CATALOG), str(ARTICLES)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"{CATALOG}: ok (spider 'testsite_catalog', item types: product; 1 link rule)",
        f"{ARTICLES}: ok (spider 'testsite_articles', item types: article; 1 link rule)",
    ]
    assert call(validate, "--quiet", str(CATALOG)) == 0
    assert capsys.readouterr().out == ""


def test_validate_invalid_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = write_spec(tmp_path, "name: s\nitems: {a: {fields: {t: {css: 'h1['}}}}\n")
    assert call(validate, str(CATALOG), str(bad)) == 1
    captured = capsys.readouterr()
    assert captured.err == (
        f"{bad}:2: items.a.fields.t.css: invalid CSS selector 'h1[': "
        "Expected ident or '*', got <EOF at 3>\n"
    )
    assert "testsite_catalog" in captured.out


# -- extract on a saved page ------------------------------------------------------------

SAVED = """<html><body>
<div class="product"><h1 class="title">Lamp 7</h1>
<span class="price">19.90</span><span class="currency">EUR</span>
<p class="listed">Listed on <time datetime="2023-02-01">February 1, 2023</time></p>
<div class="description"><p>A  good
lamp.</p></div></div>
<nav class="menu"><a href="/catalog?page=1">Catalogue</a></nav>
</body></html>"""


def test_extract_saved_file_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "p7.html"
    page.write_text(SAVED, encoding="utf-8")
    url = "http://127.0.0.1:8080/p/7"
    assert call(extract, str(CATALOG), str(page), "--url", url, "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["url"] == url
    assert out["role"] == {"item": "product", "follow": False, "depth": 0, "page": 1}
    assert out["matched_rule"] == 0
    assert out["links"] == []
    (item,) = out["items"]
    assert item == {
        "_type": "product",
        "url": url,
        "_key": url,
        "title": "Lamp 7",
        "price": "19.90",
        "currency": "EUR",
        "sku": None,
        "listed": "2023-02-01",
        "listed_text": "2023-02-01",
        "description": "A good lamp.",
        "catalogue": "http://127.0.0.1:8080/catalog?page=1",
        "_errors": ["sku: required field is empty"],
        "_warnings": ["sku: key field is empty; the page URL is the key"],
    }
    assert out["warnings"] == [
        f"{url}: product item '{url}': sku: required field is empty; "
        "sku: key field is empty; the page URL is the key"
    ]


def test_extract_saved_file_listing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "p7.html"
    page.write_text(SAVED, encoding="utf-8")
    # without --url the page is a file:// URL: no rule matches, --item picks the type
    assert call(extract, str(CATALOG), str(page), "--item", "product") == 0
    out = capsys.readouterr().out
    assert f"page   {page.resolve().as_uri()}" in out
    assert "role   item type product (start_item / --item); depth 0, page 1" in out
    assert '  title          "Lamp 7"' in out
    assert "  price          19.90 (decimal)" in out
    assert "  listed         2023-02-01 (date)" in out
    assert "  ! sku: required field is empty" in out
    assert '  _warnings      ["sku: key field is empty; the page URL is the key"]' in out
    assert "warning: file://" in out
    assert "links  0" in out


def test_extract_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert call(extract, str(CATALOG), str(tmp_path / "nope.html")) == 1
    assert "nope.html: [Errno 2] No such file or directory" in capsys.readouterr().err
    assert call(extract, str(CATALOG), str(tmp_path), "--item", "book") == 1
    assert capsys.readouterr().err == ("--item: unknown item type 'book'; declared: product\n")
    bad = write_spec(tmp_path, "name: s\n")
    assert call(extract, str(bad), "x.html") == 1
    assert capsys.readouterr().err == f"{bad}:1: (top level): missing required key 'items'\n"


# -- several item types per rule: saved pages of both kinds -----------------------------


@pytest.mark.parametrize("kind", ["product", "article"])
def test_extract_saved_page_picks_the_matching_type(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    n = next(n for n in range(3, MODEL.pages) if MODEL.is_article(n) == (kind == "article"))
    page = tmp_path / "page.html"
    page.write_text(render_page_text(MODEL, n, 8080), encoding="utf-8")
    url = MODEL.url(n, 8080)
    assert call(extract, str(FULL_SITE), str(page), "--url", url, "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["role"] == {"item": "product|article", "follow": True, "depth": 0, "page": 1}
    assert out["matched_rule"] == 0 and out["unmatched"] is False
    (item,) = out["items"]
    assert item["_type"] == kind and item["url"] == url
    if kind == "product":
        assert item["_key"] == item["sku"] == MODEL.product(n).sku
        assert item["price"] == MODEL.product(n).price
    else:
        assert item["_key"] == url and item["_auto"] == "article"
    assert "_errors" not in item and "_warnings" not in item
    assert out["warnings"] == []
    assert {link["item"] for link in out["links"]} == {"product|article"}

    assert call(extract, str(FULL_SITE), str(page), "--url", url) == 0
    listing = capsys.readouterr().out
    assert "role   item type product|article (link rule links[0]); depth 0, page 1" in listing
    assert f"item 1  {kind}  key={item['_key']}" in listing
    assert "links[0] -> product|article, depth 1" in listing


def test_extract_page_no_type_matches(site: TestSite, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{site.port}/catalog?page=2"
    assert call(extract, str(FULL_SITE), url, "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["unmatched"] is True and out["items"] == [] and out["warnings"] == []
    assert len(out["links"]) > 0


# -- extract on a served page -----------------------------------------------------------


def test_extract_product_url(site: TestSite, capsys: pytest.CaptureFixture[str]) -> None:
    n = next(n for n in range(3, MODEL.pages) if not MODEL.is_article(n))
    product = MODEL.product(n)
    assert call(extract, str(CATALOG), site.url(n), "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["role"]["item"] == "product"
    (item,) = out["items"]
    assert item["_key"] == item["sku"] == product.sku
    assert (item["title"], item["price"], item["listed"]) == (
        product.title,
        product.price,
        product.date,
    )
    assert item["listed_text"] == product.date
    assert "_errors" not in item and out["warnings"] == []


def test_extract_catalog_url_lists_links(
    site: TestSite, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{site.port}/catalog?page=1"
    assert call(extract, str(ARTICLES), url, "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["role"]["item"] is None and out["items"] == []
    links = out["links"]
    assert [link["kind"] for link in links] == ["link"] * 20 + ["next"]
    assert links[0] == {
        "url": site.url(0),
        "kind": "link",
        "rule": 0,
        "item": "article",
        "follow": False,
        "depth": 1,
        "page": 1,
    }
    assert links[-1]["url"] == f"http://127.0.0.1:{site.port}/catalog?page=2"
    assert links[-1]["page"] == 2
    call(extract, str(ARTICLES), url)
    listing = capsys.readouterr().out
    assert "role   no item type (links only); depth 0, page 1" in listing
    assert "catalog?page=2  next page 2" in listing


def test_extract_article_url_and_http_error(
    site: TestSite, capsys: pytest.CaptureFixture[str]
) -> None:
    n = min(MODEL.article_ids)
    assert call(extract, str(ARTICLES), site.url(n)) == 0
    out = capsys.readouterr().out
    assert "item type article (link rule links[0])" in out
    assert '  _auto          "article"' in out
    assert "characters)" in out
    missing = f"http://127.0.0.1:{site.port}/p/99999"
    assert call(extract, str(ARTICLES), missing) == 1
    assert capsys.readouterr().err == f"{missing}: HTTP 404 Not Found\n"
