"""Clean stage: whitespace, control characters, entities, tags, empty values."""

from __future__ import annotations

from typing import Any

import pytest
import scrapy
from scrapy.utils.test import get_crawler

from crawlfleet.exceptions import ConfigError
from crawlfleet.pipelines.clean import CleanPipeline, clean_text


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("  Hello \t\n  world  ", "Hello world"),
        ("Tom&nbsp;&amp;&nbsp;Jerry &#169; &#x4E2D;", "Tom & Jerry © 中"),
        ("<b>Bold</b> and <a href='/x'>link</a><br/>next", "Bold and link next"),
        ("x<script>var a = '<b>';</script>y<style>p{}</style>z<!-- note -->", "x y z"),
        ("a\x00b\x07c\x1b[0m\u200bd\ufeff\u00ade", "abc[0mde"),
        ("Cafe\u0301", "Café"),  # NFC
        ("\u00a0\u2003wide\u3000space\u202f", "wide space"),
        ("a < b and c > d; <Foo> stays", "a < b and c > d; <Foo> stays"),
        ("R&D, AT&T, &copy without semicolon", "R&D, AT&T, &copy without semicolon"),
        ("  https://x.test/a?b=1&copy=2&amp;c=3 ", "https://x.test/a?b=1&copy=2&amp;c=3"),
        ("emoji 👩\u200d💻 keeps its joiner", "emoji 👩\u200d💻 keeps its joiner"),
    ],
)
def test_clean_text_one_line(raw: str, expected: str) -> None:
    assert clean_text(raw) == expected


def test_clean_text_multiline_keeps_paragraphs() -> None:
    raw = "<p>First  line\r\nsecond\tline</p>\n\n\n\n<p>Next   paragraph</p>\u2028last \x0c"
    assert clean_text(raw, multiline=True) == ("First line\nsecond line\n\nNext paragraph\n\nlast")


def test_pipeline_cleans_public_fields_and_leaves_internal_ones() -> None:
    item: dict[str, Any] = {
        "title": "  A &amp; B ",
        "text": "<p>one</p><p>two</p>",
        "tags": [" x ", "", None, "<i>y</i>", "   "],
        "specs": {"weight": " 2 kg ", "color": ""},
        "price": 0,
        "in_stock": False,
        "_html": "  <p>raw</p> ",
        "_errors": [" keep "],
    }
    out = CleanPipeline().process_item(item)
    assert out is item
    assert item == {
        "title": "A & B",
        "text": "one\n\ntwo",
        "tags": ["x", "y"],
        "specs": {"weight": "2 kg"},
        "price": 0,
        "in_stock": False,
        "_html": "  <p>raw</p> ",
        "_errors": [" keep "],
    }


def test_empty_values_dropped_or_defaulted() -> None:
    item: dict[str, Any] = {"a": "  ", "b": [], "c": {}, "d": None, "e": "<br>", "currency": " "}
    CleanPipeline(defaults={"currency": "EUR", "lang": "en"}).process_item(item)
    assert item == {"currency": "EUR", "lang": "en"}

    kept = {"a": "  ", "b": []}
    CleanPipeline(drop_empty=False).process_item(kept)
    assert kept == {"a": "", "b": []}


class Product(scrapy.Item):
    name = scrapy.Field()
    note = scrapy.Field()
    currency = scrapy.Field()


def test_scrapy_items_and_undeclared_defaults() -> None:
    item = Product(name=" Widget\n", note="   ")
    CleanPipeline(defaults={"currency": "EUR", "undeclared": 1}).process_item(item)
    assert dict(item) == {"name": "Widget", "currency": "EUR"}


def test_from_crawler_reads_settings() -> None:
    crawler = get_crawler(
        settings_dict={
            "CRAWLFLEET_CLEAN_DROP_EMPTY": "false",
            "CRAWLFLEET_CLEAN_DEFAULTS": '{"lang": "en"}',
            "CRAWLFLEET_CLEAN_MULTILINE_FIELDS": "body,summary",
        }
    )
    pipeline = CleanPipeline.from_crawler(crawler)
    assert pipeline.drop_empty is False
    assert pipeline.defaults == {"lang": "en"}
    assert pipeline.multiline_fields == {"body", "summary"}
    with pytest.raises(ConfigError, match="CRAWLFLEET_CLEAN_DROP_EMPTY must be true or false"):
        CleanPipeline.from_crawler(get_crawler(settings_dict={"CRAWLFLEET_CLEAN_DROP_EMPTY": 2}))
