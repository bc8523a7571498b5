"""Validate stage: required fields and types, spider-reported errors, never a silent drop."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from scrapy.exceptions import DropItem
from scrapy.utils.test import get_crawler

from crawlfleet.exceptions import ConfigError
from crawlfleet.pipelines.validate import InvalidItem, ValidatePipeline

RULES = {
    "product": {"name": "str", "price": "number", "sku": "str?", "link": "url?"},
    "*": {"url": "url"},
}


def _pipeline(**settings: Any) -> tuple[ValidatePipeline, Any]:
    crawler = get_crawler(settings_dict={"CRAWLFLEET_VALIDATE_FIELDS": RULES, **settings})
    return ValidatePipeline.from_crawler(crawler), crawler.stats


def test_valid_items_pass_unchanged() -> None:
    pipeline, _ = _pipeline()
    item = {"_type": "product", "url": "https://s.test/p/1", "name": "A", "price": 0}
    assert pipeline.process_item(item) is item
    other = {"_type": "page", "url": "https://s.test/"}
    assert pipeline.process_item(other) is other
    assert pipeline.process_item({"url": "https://s.test/", "_errors": []})


def test_invalid_item_is_counted_logged_sent_and_dropped(caplog: pytest.LogCaptureFixture) -> None:
    pipeline, stats = _pipeline()
    received: list[InvalidItem] = []
    pipeline.invalid_sinks.append(received.append)
    item = {
        "_type": "product",
        "url": "https://s.test/p/2",
        "name": "  ",
        "price": "12",
        "link": "/relative",
        "_html": "<p>big</p>",
    }
    with caplog.at_level(logging.WARNING), pytest.raises(DropItem) as dropped:
        pipeline.process_item(item)
    message = str(dropped.value)
    assert message.startswith("invalid product item from https://s.test/p/2: ")
    assert "name: required, missing" in message
    assert "price: expected number, got str '12'" in message
    assert "link: expected url" in message
    assert stats.get_value("crawlfleet/items/invalid") == 1
    assert stats.get_value("crawlfleet/items/invalid/missing_field") == 1
    assert stats.get_value("crawlfleet/items/invalid/wrong_type") == 1
    assert [r.levelname for r in caplog.records if "invalid product item" in r.getMessage()] == [
        "WARNING"
    ]
    assert len(received) == 1
    record = received[0]
    assert record.url == "https://s.test/p/2"
    assert record.item_type == "product"
    assert record.reasons == ["missing_field", "wrong_type"]
    assert [p.field for p in record.problems] == ["name", "price", "link"]
    assert "_html" not in record.item and record.item["price"] == "12"


def test_spider_errors_make_the_item_invalid() -> None:
    pipeline, stats = _pipeline()
    item = {
        "_type": "page",
        "url": "https://s.test/a",
        "_errors": [
            "price: required field is empty",
            "stock: cannot convert 'many' to int",
            {"field": "date", "reason": "Bad Date!", "message": "date: not a date"},
        ],
    }
    with pytest.raises(DropItem, match="price: required field is empty; stock: cannot convert"):
        pipeline.process_item(item)
    assert stats.get_value("crawlfleet/items/invalid/missing_field") == 1
    assert stats.get_value("crawlfleet/items/invalid/spider_error") == 1
    assert stats.get_value("crawlfleet/items/invalid/bad_date") == 1


def test_a_failing_sink_does_not_stop_the_drop(caplog: pytest.LogCaptureFixture) -> None:
    def broken(record: InvalidItem) -> None:
        raise RuntimeError("registry down")

    pipeline = ValidatePipeline(RULES, invalid_sinks=[broken])
    with pytest.raises(DropItem):
        pipeline.process_item({"_type": "product", "url": "https://s.test/p"})
    assert any("Invalid-item sink" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"product": {"price": "money"}}, r"\['product'\]\['price'\]: unknown type 'money'"),
        ({"product": ["price"]}, r"\['product'\] must be a dict"),
        ('{"product": ', "must be a dict or a JSON object"),
    ],
)
def test_wrong_rules_are_rejected_naming_the_setting(rules: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=f"CRAWLFLEET_VALIDATE_FIELDS.*{message}"):
        ValidatePipeline.from_crawler(
            get_crawler(settings_dict={"CRAWLFLEET_VALIDATE_FIELDS": rules})
        )


def test_decimal_values_are_numbers() -> None:
    """The spec spiders' "decimal" processor yields Decimal: a number for validation."""
    from decimal import Decimal

    from crawlfleet.pipelines.validate import FIELD_TYPES

    assert FIELD_TYPES["number"](Decimal("9.99")) and FIELD_TYPES["float"](Decimal("1"))
    assert not FIELD_TYPES["number"](True)
