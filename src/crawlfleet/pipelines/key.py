"""Key stage: the identity of each item, used by stores to upsert.

The key of an item is ``sha1(json([item type, part, ...]))`` in lower-case hex (40
characters, :func:`make_key`). The parts come from the first of:

1. the fields declared for the item's type in ``CRAWLFLEET_KEY_FIELDS``, e.g.
   ``{"product": ["shop", "sku"]}``;
2. the identity the spider gave in ``_key`` (spec spiders set it to the page URL or to
   the values of the spec's ``key`` fields), as one part;
3. the fields declared under ``"*"`` in ``CRAWLFLEET_KEY_FIELDS``;
4. the page URL (``url`` field) in canonical form (query arguments sorted, fragment
   removed), so the same page stored twice is one row.

Parts: strings stripped, numbers and booleans as JSON, lists and dicts as canonical JSON
(sorted keys). The item type is part of the key, so two types built from the same page
do not overwrite each other. A ``_key`` that already is a 40-character lower-case hex
digest is final and kept as it is (so running the stage twice changes nothing).

The stage stores the key in ``_key`` and the parts in ``_key_parts`` (internal fields:
stores keep the key in its own column and do not store the parts). An item whose
declared key fields are empty, or that has no key fields and no URL, is invalid (reason
``missing_key``) and is recorded and dropped like in the validate stage.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Self

from itemadapter import ItemAdapter
from scrapy import Spider
from scrapy.crawler import Crawler
from scrapy.statscollectors import StatsCollector
from w3lib.url import canonicalize_url

from crawlfleet.exceptions import ConfigError
from crawlfleet.pipelines._util import is_empty, item_type, item_url, set_field
from crawlfleet.pipelines.validate import InvalidItemReporter, InvalidSink, Problem
from crawlfleet.settings.access import get_dict

__all__ = [
    "MAX_KEY_LENGTH",
    "ItemKeyer",
    "KeyPipeline",
    "KeyUnavailable",
    "is_final_key",
    "make_key",
]

logger = logging.getLogger(__name__)

#: Size of the stores' key column (keys are 40 characters; room for other schemes).
MAX_KEY_LENGTH = 128
_DIGEST_RE = re.compile("[0-9a-f]{40}")


class KeyUnavailable(ValueError):
    """An item's key cannot be made; ``reason`` is the invalid-item reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def make_key(kind: str, parts: Sequence[str]) -> str:
    """The key of an item of type *kind* whose key parts are *parts*."""
    joined = json.dumps([kind, *parts], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha1(joined.encode("utf-8"), usedforsecurity=False).hexdigest()


def is_final_key(value: Any) -> bool:
    """True for a value that already is a key (40 lower-case hex characters)."""
    return isinstance(value, str) and _DIGEST_RE.fullmatch(value) is not None


def _part(value: Any) -> str:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list | tuple | Mapping):
        return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return json.dumps(value, ensure_ascii=False, default=str)


class ItemKeyer:
    """Computes item keys from ``{item type: [field, ...]}`` (see the module docstring)."""

    def __init__(self, fields: Mapping[str, Sequence[str]] | None = None) -> None:
        self.fields: dict[str, tuple[str, ...]] = {}
        for kind, names in (fields or {}).items():
            if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
                raise ConfigError(
                    f"CRAWLFLEET_KEY_FIELDS[{kind!r}] must be a list of field names, got {names!r}"
                )
            if not names:
                raise ConfigError(f"CRAWLFLEET_KEY_FIELDS[{kind!r}] must not be empty")
            self.fields[kind] = tuple(names)

    def _from_fields(self, adapter: ItemAdapter, names: Sequence[str]) -> list[str]:
        missing = [name for name in names if is_empty(adapter.get(name))]
        if missing:
            raise KeyUnavailable("missing_key", f"key fields {', '.join(missing)} empty")
        return [_part(adapter.get(name)) for name in names]

    def parts(self, adapter: ItemAdapter) -> tuple[str, list[str]]:
        """``(item type, key parts)`` of an item; raises :class:`KeyUnavailable`."""
        kind = item_type(adapter)
        if kind in self.fields:
            return kind, self._from_fields(adapter, self.fields[kind])
        own = adapter.get("_key")
        if not is_empty(own):
            return kind, [_part(own)]
        if "*" in self.fields:
            return kind, self._from_fields(adapter, self.fields["*"])
        url = item_url(adapter)
        if url is None:
            raise KeyUnavailable("missing_key", "no key fields, no _key and no url field")
        return kind, [canonicalize_url(url.strip(), keep_fragments=False)]

    def key(self, adapter: ItemAdapter) -> str:
        """The item's key: its ``_key`` if that is final, else made from its parts."""
        own = adapter.get("_key")
        if is_final_key(own):
            return str(own)
        return make_key(*self.parts(adapter))


class KeyPipeline:
    """Item pipeline of the key stage: sets ``_key`` (see the module docstring)."""

    def __init__(
        self,
        fields: Mapping[str, Sequence[str]] | None = None,
        *,
        stats: StatsCollector | None = None,
        invalid_sinks: Iterable[InvalidSink] = (),
    ) -> None:
        self.keyer = ItemKeyer(fields)
        self.reporter = InvalidItemReporter(stats, invalid_sinks)
        self._warned_classes: set[type] = set()

    @property
    def invalid_sinks(self) -> list[InvalidSink]:
        """Callables told about each item dropped for want of a key."""
        return self.reporter.sinks

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Build from CRAWLFLEET_KEY_FIELDS."""
        return cls(get_dict(crawler.settings, "CRAWLFLEET_KEY_FIELDS"), stats=crawler.stats)

    def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        """Set ``_key`` and ``_key_parts``; record and drop the item if it has no key."""
        adapter = ItemAdapter(item)
        if is_final_key(adapter.get("_key")):
            return item
        try:
            kind, parts = self.keyer.parts(adapter)
        except KeyUnavailable as exc:
            problem = Problem(exc.reason, "_key", f"key: {exc}")
            raise self.reporter.reject(adapter, [problem], "key") from None
        if not set_field(adapter, "_key", make_key(kind, parts)):
            if type(item) not in self._warned_classes:
                self._warned_classes.add(type(item))
                # not a problem (the stores compute the same key): no warning on every start
                logger.debug(
                    "Item class %s does not declare a _key field; stores compute the key again",
                    type(item).__name__,
                )
            return item
        set_field(adapter, "_key_parts", parts)
        return item
