"""Key stage: stable keys from declared fields, the spider's identity or the URL."""

from __future__ import annotations

from typing import Any

import pytest
import scrapy
from itemadapter import ItemAdapter
from scrapy.exceptions import DropItem
from scrapy.utils.test import get_crawler

from crawlfleet.exceptions import ConfigError
from crawlfleet.pipelines.key import ItemKeyer, KeyPipeline, is_final_key, make_key


def _key(item: dict[str, Any], fields: dict[str, list[str]] | None = None) -> str:
    return KeyPipeline(fields).process_item(dict(item))["_key"]  # type: ignore[no-any-return]


def test_key_is_stable_across_runs_and_versions() -> None:
    # sha1('["product","https://s.test/p/1"]'): a change here re-keys every stored item.
    assert make_key("product", ["https://s.test/p/1"]) == (
        "d344f1ae2d1aead21dea0580c0b6ebec93b097f0"
    )
    assert make_key("product", ["https://s.test/p/1"]) == make_key(
        "product", ["https://s.test/p/1"]
    )


def test_url_key_is_canonical() -> None:
    base = {"_type": "page", "url": "https://s.test/a?b=2&a=1#top"}
    same = {"_type": "page", "url": "https://s.test/a?a=1&b=2", "title": "other"}
    assert _key(base) == _key(same) == make_key("page", ["https://s.test/a?a=1&b=2"])
    assert _key(base) != _key({**base, "_type": "review"})  # the type is part of the key


def test_declared_fields_then_spider_key_then_star_then_url() -> None:
    fields = {"product": ["shop", "sku"], "*": ["slug"]}
    product = {"_type": "product", "url": "https://s.test/p", "shop": " Acme ", "sku": 42}
    assert _key(product, fields) == make_key("product", ["Acme", "42"])
    moved = {**product, "url": "https://s.test/new-url", "_key": "ignored"}
    assert _key(moved, fields) == _key(product, fields)
    spec_item = {
        "_type": "review",
        "url": "https://s.test/r",
        "_key": "https://s.test/r",
        "slug": "x",
    }
    assert _key(spec_item, fields) == make_key("review", ["https://s.test/r"])
    other = {"_type": "page", "url": "https://s.test/q", "slug": ["b", "a"]}
    assert _key(other, fields) == make_key("page", ['["b","a"]'])
    assert _key({"_type": "page", "url": "https://s.test/q"}) == make_key(
        "page", ["https://s.test/q"]
    )


def test_key_parts_are_kept_and_final_keys_are_not_rekeyed() -> None:
    item = KeyPipeline({"product": ["sku"]}).process_item({"_type": "product", "sku": "A1"})
    assert item["_key_parts"] == ["A1"]
    assert is_final_key(item["_key"])
    again = KeyPipeline().process_item(dict(item))
    assert again["_key"] == item["_key"]


def test_missing_key_fields_drop_the_item_with_a_reason() -> None:
    crawler = get_crawler(settings_dict={"CRAWLFLEET_KEY_FIELDS": {"product": ["sku"]}})
    pipeline = KeyPipeline.from_crawler(crawler)
    seen: list[Any] = []
    pipeline.invalid_sinks.append(seen.append)
    with pytest.raises(DropItem, match=r"from https://s.test/p: key: key fields sku empty"):
        pipeline.process_item({"_type": "product", "url": "https://s.test/p", "sku": " "})
    with pytest.raises(DropItem, match="no key fields, no _key and no url"):
        pipeline.process_item({"title": "x"})
    assert crawler.stats is not None
    assert crawler.stats.get_value("crawlfleet/items/invalid/missing_key") == 2
    assert [r.stage for r in seen] == ["key", "key"]


class Product(scrapy.Item):
    url = scrapy.Field()
    sku = scrapy.Field()


def test_item_without_key_field_is_keyed_again_by_the_store() -> None:
    item = Product(url="https://s.test/p", sku="A1")
    KeyPipeline({"Product": ["sku"]}).process_item(item)
    assert "_key" not in item
    assert ItemKeyer({"Product": ["sku"]}).key(ItemAdapter(item)) == make_key("Product", ["A1"])


@pytest.mark.parametrize("fields", [{"product": "sku"}, {"product": []}, {"product": [1]}])
def test_wrong_key_fields_setting(fields: Any) -> None:
    with pytest.raises(ConfigError, match=r"CRAWLFLEET_KEY_FIELDS\['product'\]"):
        KeyPipeline.from_crawler(get_crawler(settings_dict={"CRAWLFLEET_KEY_FIELDS": fields}))
