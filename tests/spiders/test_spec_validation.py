"""Loading specs: what a valid spec becomes, and the exact error of each kind of mistake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawlfleet.exceptions import ConfigError
from crawlfleet.spiders.schema import (
    ARG_PROCESSORS,
    BARE_PROCESSORS,
    SPEC_SCHEMA,
    schema_json,
)
from crawlfleet.spiders.spec import (
    LinkRule,
    ProcessorSpec,
    Query,
    SpecError,
    load_spec,
    parse_spec,
)
from tests.support.paths import EXAMPLES, ROOT
from tests.support.specs import write_spec

GOOD = """
name: books
start_urls: [http://books.example/]
allowed_domains: [books.example]
max_depth: 3
request:
  headers: {Accept-Language: en}
  cookies: false
  meta: {download_timeout: 5}
settings: {DOWNLOAD_DELAY: 0.5}
links:
  - allow: /book/
    item: book
pagination: {css: a.next, max_pages: 4}
items:
  book:
    key: [isbn]
    fields:
      title: {css: 'h1::text', required: true}
      isbn: {xpath: '//span[@id="isbn"]/text()', re: '\\d+'}
      price:
        css: '.price::text'
        processors: [strip, {replace: [',', '']}, decimal]
      tags: {css: '.tag::text', many: true}
      published:
        css: time::text
        processors: [{date: '%d/%m/%Y'}]
      stock: {css: '.stock::text', default: 0}
"""


def problems_of(tmp_path: Path, text: str, name: str = "spec.yaml") -> str:
    path = write_spec(tmp_path, text, name)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert isinstance(info.value, ConfigError)
    return str(info.value).replace(str(path), name)


def test_valid_spec_becomes_typed_dataclasses(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path, GOOD))
    assert spec.name == "books"
    assert spec.start_urls == ("http://books.example/",)
    assert spec.max_depth == 3
    assert spec.request.cookies is False
    assert spec.request.headers == {"Accept-Language": "en"}
    assert spec.settings == {"DOWNLOAD_DELAY": 0.5}
    assert spec.links == (LinkRule(allow=("/book/",), item_types=("book",), follow=False),)
    assert spec.start_item_types == ()
    assert spec.pagination is not None and spec.pagination.max_pages == 4
    book = spec.items["book"]
    assert book.key == ("isbn",)
    fields = {f.name: f for f in book.fields}
    assert list(fields) == ["title", "isbn", "price", "tags", "published", "stock"]
    assert fields["isbn"].query == Query("xpath", '//span[@id="isbn"]/text()')
    assert fields["isbn"].regex == r"\d+"
    assert fields["price"].processors == (
        ProcessorSpec("strip"),
        ProcessorSpec("replace", (",", "")),
        ProcessorSpec("decimal"),
    )
    assert fields["published"].processors == (ProcessorSpec("date", ("%d/%m/%Y",)),)
    assert fields["tags"].many and fields["title"].required
    assert fields["stock"].has_default and fields["stock"].default == 0
    assert not fields["title"].has_default


def test_follow_defaults_like_crawlspider(tmp_path: Path) -> None:
    spec = load_spec(
        write_spec(
            tmp_path,
            """
            name: s
            start_item: a
            links: [{allow: x}, {allow: y, item: a}, {allow: z, item: a, follow: true}]
            items: {a: {auto: article}}
            """,
        )
    )
    assert [r.follow for r in spec.links] == [True, False, True]


def test_json_spec_and_parse_spec(tmp_path: Path) -> None:
    data = {"name": "j", "start_item": "a", "items": {"a": {"fields": {"t": {"css": "h1"}}}}}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(data))
    assert load_spec(path).items["a"].fields[0].query == Query("css", "h1")
    assert parse_spec(data).name == "j"
    with pytest.raises(SpecError, match=r"^inline: items.a.fields.t.css: must not be empty$"):
        parse_spec({**data, "items": {"a": {"fields": {"t": {"css": ""}}}}}, "inline")


def test_unknown_keys_wrong_types_and_bad_names(tmp_path: Path) -> None:
    text = problems_of(
        tmp_path,
        """
        name: "bad name"
        extra: 1
        max_depth: -1
        start_urls: http://x.example/
        links:
          - allow: 5
            follow: "yes"
        items:
          book:
            fields:
              title: {css: 'h1::text', defualt: x, required: 1}
              price:
                css: span
                processors: [stripp, {joinn: ","}, 5, {date: []}]
          "bad item": {auto: article}
          art: {auto: blog}
        settings: {download_delay: 1}
        """,
    )
    assert text.splitlines() == [
        "spec.yaml:1: name: invalid spider name 'bad name': use up to 200 letters, digits, "
        "'_', '.' or '-', starting with a letter or digit",
        "spec.yaml:2: extra: unknown key; allowed keys: allowed_domains, items, links, "
        "max_depth, meta_refresh, name, pagination, request, settings, start_item, "
        "start_urls, version",
        "spec.yaml:3: max_depth: must be >= 0, got -1",
        "spec.yaml:4: start_urls: expected a list, got a string ('http://x.example/')",
        "spec.yaml:6: links[0].allow: expected a string or a list, got a number (5)",
        "spec.yaml:7: links[0].follow: expected true or false, got a string ('yes')",
        "spec.yaml:11: items.book.fields.title.defualt: unknown key (did you mean 'default'?); "
        "allowed keys: css, default, many, processors, re, required, xpath",
        "spec.yaml:11: items.book.fields.title.required: expected true or false, got a number (1)",
        "spec.yaml:14: items.book.fields.price.processors[0]: unknown processor 'stripp' "
        "(did you mean 'strip'?); known: strip, normalize_space, lower, upper, join, "
        "absolute_url, int, float, decimal, date",
        "spec.yaml:14: items.book.fields.price.processors[1]: unknown processor 'joinn' "
        "(did you mean 'join'?)",
        "spec.yaml:14: items.book.fields.price.processors[2]: expected a processor name or "
        "a one-key mapping, got a number (5)",
        "spec.yaml:14: items.book.fields.price.processors[3].date: must have at least 1 item",
        "spec.yaml:15: items.bad item: invalid item type name 'bad item': use letters, "
        "digits and '_', starting with a letter",
        "spec.yaml:16: items.art.auto: got a string ('blog'); expected one of: 'article'",
        "spec.yaml:17: settings.download_delay: invalid setting name: Scrapy settings are "
        "UPPER_CASE",
    ]


def test_missing_required_keys(tmp_path: Path) -> None:
    assert problems_of(tmp_path, "start_urls: []\n").splitlines() == [
        "spec.yaml:1: (top level): missing required key 'name'",
        "spec.yaml:1: (top level): missing required key 'items'",
    ]
    assert problems_of(tmp_path, "- a\n") == (
        "spec.yaml:1: (top level): expected a mapping, got a list"
    )


def test_invalid_selectors_regexes_and_references(tmp_path: Path) -> None:
    text = problems_of(
        tmp_path,
        r"""
        name: books
        start_urls: [ftp://x.example/, "http://ok.example/"]
        allowed_domains: ["http://books.example/"]
        start_item: nope
        links:
          - allow: ['/book/(\d+']
            deny: [ok, '[']
            restrict_css: 'div['
            restrict_xpath: [//div, '//div[']
            item: bok
        pagination: {css: a.next, xpath: //a}
        items:
          book:
            key: [isbn]
            each: {}
            match: {css: "a::foo"}
            fields:
              title: {css: 'h1::text', required: true, default: x}
              price:
                css: 'span['
                re: '(\d+'
                processors: [int, strip, {replace: ['(', '']}]
              url: {xpath: '//a['}
              both: {css: a, xpath: //a}
              neither: {re: x}
              bad: {xpath: 'foo()'}
          empty: {}
          art: {auto: article, key: x}
        """,
    )
    assert text.splitlines() == [
        "spec.yaml:2: start_urls[0]: not an http(s) URL: 'ftp://x.example/' "
        "(must be http or https, not 'ftp')",
        "spec.yaml:3: allowed_domains[0]: expected a domain name such as 'example.com', "
        "got 'http://books.example/'",
        "spec.yaml:4: start_item: unknown item type 'nope'; declared: art, book, empty",
        r"spec.yaml:6: links[0].allow[0]: invalid regex '/book/(\d+': missing ), "
        "unterminated subpattern at position 6",
        "spec.yaml:7: links[0].deny[1]: invalid regex '[': unterminated character set "
        "at position 0",
        "spec.yaml:8: links[0].restrict_css: invalid CSS selector 'div[': "
        "Expected ident or '*', got <EOF at 4>",
        "spec.yaml:9: links[0].restrict_xpath[1]: invalid XPath '//div[': "
        "Invalid expression in //div[",
        "spec.yaml:10: links[0].item: unknown item type 'bok' (did you mean 'book'?); "
        "declared: art, book, empty",
        "spec.yaml:11: pagination: needs exactly one of 'css' or 'xpath', found both",
        "spec.yaml:14: items.book.key[0]: unknown field 'isbn'; declared: title, price, "
        "url, both, neither, bad",
        "spec.yaml:15: items.book.each: needs exactly one of 'css' or 'xpath', found neither",
        "spec.yaml:16: items.book.match.css: invalid CSS selector 'a::foo': "
        "The pseudo-element ::foo is unknown",
        "spec.yaml:18: items.book.fields.title.default: a required field cannot have a "
        "default (it is never empty)",
        "spec.yaml:20: items.book.fields.price.css: invalid CSS selector 'span[': "
        "Expected ident or '*', got <EOF at 5>",
        r"spec.yaml:21: items.book.fields.price.re: invalid regex '(\d+': missing ), "
        "unterminated subpattern at position 0",
        "spec.yaml:22: items.book.fields.price.processors[0]: 'int' converts the value "
        "and must be the last processor",
        "spec.yaml:22: items.book.fields.price.processors[2].replace[0]: invalid regex "
        "'(': missing ), unterminated subpattern at position 0",
        "spec.yaml:23: items.book.fields.url: field name 'url' is reserved (every item has it)",
        "spec.yaml:23: items.book.fields.url.xpath: invalid XPath '//a[': "
        "Invalid expression in //a[",
        "spec.yaml:24: items.book.fields.both: needs exactly one of 'css' or 'xpath', found both",
        "spec.yaml:25: items.book.fields.neither: needs exactly one of 'css' or 'xpath', "
        "found neither",
        "spec.yaml:26: items.book.fields.bad.xpath: invalid XPath 'foo()': "
        "Unregistered function in foo()",
        "spec.yaml:27: items.empty: needs 'fields' (or 'auto: article')",
        "spec.yaml:28: items.art.key: not allowed with 'auto: article' (the page is "
        "extracted by the text-extraction pipeline)",
    ]


def test_several_item_types_per_rule(tmp_path: Path) -> None:
    spec = load_spec(
        write_spec(
            tmp_path,
            """
            name: s
            start_item: [product, article]
            links:
              - item: [product, article, page]
              - allow: x
                item: article
            items:
              product: {match: {css: div.product}, fields: {t: {css: 'h1::text'}}}
              article: {auto: article, match: {css: article}}
              page: {fields: {t: {css: 'h1::text'}}}
            """,
        )
    )
    assert spec.start_item_types == ("product", "article")
    assert [(r.item_types, r.follow) for r in spec.links] == [
        (("product", "article", "page"), False),
        (("article",), False),
    ]


def test_item_type_lists_are_checked(tmp_path: Path) -> None:
    text = problems_of(
        tmp_path,
        """
        name: s
        start_item: [page, product]
        links:
          - item: [product, artcle]
          - item: [page, article, product]
          - item: [product, product]
          - item: [article, page]
        items:
          product: {match: {css: div.product}, fields: {t: {css: 'h1::text'}}}
          article: {auto: article}
          page: {fields: {t: {css: 'h1::text'}}}
        """,
    )
    assert text.splitlines() == [
        "spec.yaml:2: start_item[0]: item type 'page' has no 'match', so it takes every "
        "page and 'product' after it would never be tried: give it a 'match' or list it last",
        "spec.yaml:4: links[0].item[1]: unknown item type 'artcle' (did you mean "
        "'article'?); declared: article, page, product",
        "spec.yaml:5: links[1].item[0]: item type 'page' has no 'match', so it takes every "
        "page and 'article', 'product' after it would never be tried: give it a 'match' or "
        "list it last",
        "spec.yaml:5: links[1].item[1]: item type 'article' has no 'match', so it takes "
        "every page and 'product' after it would never be tried: give it a 'match' or list "
        "it last",
        "spec.yaml:6: links[2].item[1]: item type 'product' is listed twice",
        "spec.yaml:7: links[3].item[0]: item type 'article' has no 'match', so it takes "
        "every page and 'page' after it would never be tried: give it a 'match' or list "
        "it last",
    ]


def test_item_type_list_shape(tmp_path: Path) -> None:
    text = problems_of(
        tmp_path,
        """
        name: s
        start_item: []
        links:
          - item: [a, 5]
          - item: {a: 1}
        items: {a: {auto: article}}
        """,
    )
    assert text.splitlines() == [
        "spec.yaml:2: start_item: must have at least 1 item",
        "spec.yaml:4: links[0].item[1]: expected a string, got a number (5)",
        "spec.yaml:5: links[1].item: expected a string or a list, got a mapping",
    ]


def test_each_needs_a_key(tmp_path: Path) -> None:
    text = problems_of(
        tmp_path,
        """
        name: s
        start_item: row
        items:
          row:
            each: {css: tr}
            fields: {cell: {css: 'td::text'}}
        """,
    )
    assert text == (
        "spec.yaml:4: items.row.key: required with 'each': the items of one page would "
        "share the page URL"
    )


def test_file_level_errors(tmp_path: Path) -> None:
    assert problems_of(tmp_path, "name: a\nname: b\n") == (
        "spec.yaml:2: invalid YAML: duplicate key 'name'"
    )
    assert problems_of(tmp_path, "name: [a\n") == (
        "spec.yaml:2: invalid YAML: expected ',' or ']', but got '<stream end>'"
    )
    assert problems_of(tmp_path, '{"name": ', "spec.json") == (
        "spec.json:1: invalid JSON: Expecting value"
    )
    json_text = '{"name": "j", "items": {"a": {"fields": {"t": {"css": "h1["}}}}}'
    assert problems_of(tmp_path, json_text, "spec.json") == (
        "spec.json: items.a.fields.t.css: invalid CSS selector 'h1[': "
        "Expected ident or '*', got <EOF at 3>"
    )
    with pytest.raises(SpecError, match=r"missing\.yaml: spec file not found$"):
        load_spec(tmp_path / "missing.yaml")


def test_unused_item_type_is_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    load_spec(write_spec(tmp_path, "name: s\nitems: {a: {auto: article}}\n"))
    assert "items.a: no link rule or start_item yields this item type" in caplog.text


def test_published_schema_is_up_to_date() -> None:
    published = (ROOT / "docs" / "spec.schema.json").read_text(encoding="utf-8")
    assert published == schema_json(), (
        "docs/spec.schema.json is stale: python -m crawlfleet.spiders.schema docs/spec.schema.json"
    )
    assert json.loads(published) == SPEC_SCHEMA


def test_every_processor_in_the_schema_is_implemented() -> None:
    from crawlfleet.spiders.processors import _STEPS

    assert set(BARE_PROCESSORS) | set(ARG_PROCESSORS) == set(_STEPS)


@pytest.mark.parametrize(
    "name", ["testsite.yaml", "testsite_catalog.yaml", "testsite_articles.yaml"]
)
def test_examples_are_valid(name: str) -> None:
    spec = load_spec(EXAMPLES / name)
    assert spec.name == name.removesuffix(".yaml")


def test_full_example_in_the_docs_is_valid(tmp_path: Path) -> None:
    doc = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
    block = doc.split("## A full example", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    spec = load_spec(write_spec(tmp_path, block))
    assert set(spec.items) == {"book", "author", "listing"}
    assert spec.items["listing"].key == ("isbn",)


def test_a_start_url_without_a_host_is_refused(tmp_path: Path) -> None:
    text = GOOD.replace(
        "[http://books.example/]", '["http://:80/", "http://user@/x", "https:///path"]'
    )
    assert problems_of(tmp_path, text).splitlines() == [
        "spec.yaml:2: start_urls[0]: not an http(s) URL: 'http://:80/' (has no host)",
        "spec.yaml:2: start_urls[1]: not an http(s) URL: 'http://user@/x' (has no host)",
        "spec.yaml:2: start_urls[2]: not an http(s) URL: 'https:///path' (has no host)",
    ]
