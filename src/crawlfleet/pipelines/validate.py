"""Validate stage: required fields and types; invalid items are recorded, then dropped.

Rules come from two places:

- ``CRAWLFLEET_VALIDATE_FIELDS``: item type -> ``{field: type}`` where type is one of
  :data:`FIELD_TYPES`; a trailing ``?`` makes the field optional (its type is checked
  only when it has a value). Rules under ``"*"`` apply to every item type. The item type
  is the ``_type`` field, else the item class name, else ``"item"``.
- the item's ``_errors`` list, which spec spiders fill when a required field came out
  empty. Entries are ``"field: problem"`` strings (reason ``missing_field`` when the
  problem says a required field is empty or missing, else ``spider_error``) or dicts
  ``{"field": ..., "reason": ..., "message": ...}``. Any entry makes the item invalid.

A value is missing when it is absent, None, blank, or an empty list/dict (0 and False are
values). An invalid item is never dropped silently: for each reason the stats counter
``crawlfleet/items/invalid/<reason>`` goes up (and ``crawlfleet/items/invalid`` once),
one WARNING names the item type, page URL and problems, every callable in
``invalid_sinks`` receives an :class:`InvalidItem`, and then ``DropItem`` is raised
with the same message. Reasons: ``missing_field``, ``wrong_type``, ``spider_error``
(or the reason a spider gave), and ``missing_key``/``bad_key`` from the key stage.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Self
from urllib.parse import urlsplit

from itemadapter import ItemAdapter
from scrapy import Spider
from scrapy.crawler import Crawler
from scrapy.exceptions import DropItem
from scrapy.statscollectors import StatsCollector

from crawlfleet.exceptions import ConfigError
from crawlfleet.pipelines._util import is_empty, item_type, item_url
from crawlfleet.settings.access import get_dict

__all__ = [
    "FIELD_TYPES",
    "InvalidItem",
    "InvalidItemReporter",
    "InvalidSink",
    "Problem",
    "ValidatePipeline",
    "parse_rules",
]

logger = logging.getLogger(__name__)


def _is_url(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    parts = urlsplit(value.strip())
    return parts.scheme in ("http", "https") and bool(parts.netloc)


#: Type name -> check of a (non-missing) value.
FIELD_TYPES: dict[str, Callable[[Any], bool]] = {
    "str": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    # Decimal counts as a number: the spec's "decimal" processor yields it
    "float": lambda v: isinstance(v, int | float | Decimal) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float | Decimal) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "list": lambda v: isinstance(v, list | tuple),
    "dict": lambda v: isinstance(v, Mapping),
    "url": _is_url,
    "any": lambda v: True,
}
_REASON_RE = re.compile(r"[^a-z0-9_]+")
_FIELD_RE = re.compile(r"[A-Za-z_][\w.-]*")
# How spec spiders word an empty required field ("price: required field is empty").
_MISSING_RE = re.compile(r"\brequired\b.*\b(empty|missing)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Problem:
    """One reason an item is invalid; *field* is None when it is not about one field."""

    reason: str
    field: str | None
    message: str


@dataclass(frozen=True)
class InvalidItem:
    """What an invalid-item sink receives: the page, the item and why it was dropped."""

    url: str | None
    item_type: str
    problems: tuple[Problem, ...]
    item: dict[str, Any] = field(repr=False)
    stage: str = "validate"

    @property
    def reasons(self) -> list[str]:
        """The distinct reasons, in order of first appearance."""
        return list(dict.fromkeys(p.reason for p in self.problems))


#: A callable told about every invalid item before it is dropped (e.g. the error
#: registry). It runs on the reactor thread and must not block; errors are logged.
InvalidSink = Callable[[InvalidItem], None]


class InvalidItemReporter:
    """Records invalid items (stats, log, sinks) and builds the ``DropItem`` to raise."""

    def __init__(
        self, stats: StatsCollector | None = None, sinks: Iterable[InvalidSink] = ()
    ) -> None:
        self.stats = stats
        #: Callables told about each invalid item; append to plug in a registry.
        self.sinks: list[InvalidSink] = list(sinks)

    def reject(self, adapter: ItemAdapter, problems: Iterable[Problem], stage: str) -> DropItem:
        """Record the item as invalid and return the ``DropItem`` the caller raises."""
        record = InvalidItem(
            url=item_url(adapter),
            item_type=item_type(adapter),
            problems=tuple(problems),
            item={k: v for k, v in adapter.items() if k != "_html"},
            stage=stage,
        )
        if self.stats is not None:
            self.stats.inc_value("crawlfleet/items/invalid")
            for reason in record.reasons:
                self.stats.inc_value(f"crawlfleet/items/invalid/{reason}")
        details = "; ".join(p.message for p in record.problems)
        message = f"invalid {record.item_type} item from {record.url or '(no url)'}: {details}"
        logger.warning("Dropped %s", message)
        for sink in self.sinks:
            try:
                sink(record)
            except Exception:
                logger.exception("Invalid-item sink %r failed on an item from %s", sink, record.url)
        # Logged above with the reason; Scrapy's own "Dropped:" line (with the whole
        # item) goes to DEBUG.
        return DropItem(message, log_level="DEBUG")


def parse_rules(
    rules: Mapping[str, Any], setting: str = "rules"
) -> dict[str, dict[str, tuple[str, bool]]]:
    """Validate ``{item type: {field: type}}``; return ``{type: {field: (type, required)}}``.

    Raises ConfigError naming *setting* and the wrong entry.
    """
    parsed: dict[str, dict[str, tuple[str, bool]]] = {}
    for type_name, fields in rules.items():
        if not isinstance(fields, Mapping):
            raise ConfigError(f"{setting}[{type_name!r}] must be a dict of field: type")
        parsed[type_name] = {}
        for name, spec in fields.items():
            if not isinstance(name, str) or not isinstance(spec, str):
                raise ConfigError(f"{setting}[{type_name!r}] must map field names to type names")
            base = spec.strip().removesuffix("?")
            if base not in FIELD_TYPES:
                raise ConfigError(
                    f"{setting}[{type_name!r}][{name!r}]: unknown type {spec!r} "
                    f"(expected one of {', '.join(FIELD_TYPES)}, optionally ending in ?)"
                )
            parsed[type_name][name] = (base, not spec.strip().endswith("?"))
    return parsed


def _spider_problems(errors: Any) -> list[Problem]:
    if is_empty(errors):
        return []
    if isinstance(errors, str | Mapping):
        errors = [errors]
    if not isinstance(errors, list | tuple):
        return [Problem("spider_error", None, f"_errors is not a list: {errors!r}")]
    problems = []
    for entry in errors:
        if isinstance(entry, Mapping):
            reason = _REASON_RE.sub("_", str(entry.get("reason") or "spider_error").lower())
            name = entry.get("field")
            text = entry.get("message") or (f"{name}: {reason}" if name else reason)
            problems.append(Problem(reason.strip("_") or "spider_error", name, str(text)))
        else:
            text = str(entry)
            name, sep, rest = text.partition(": ")
            field_name = name if sep and _FIELD_RE.fullmatch(name) else None
            reason = "missing_field" if _MISSING_RE.search(rest or text) else "spider_error"
            problems.append(Problem(reason, field_name, text))
    return problems


class ValidatePipeline:
    """Item pipeline of the validate stage (see the module docstring)."""

    def __init__(
        self,
        rules: Mapping[str, Mapping[str, str]] | None = None,
        *,
        stats: StatsCollector | None = None,
        invalid_sinks: Iterable[InvalidSink] = (),
    ) -> None:
        self.rules = parse_rules(rules or {}, "CRAWLFLEET_VALIDATE_FIELDS")
        self.reporter = InvalidItemReporter(stats, invalid_sinks)

    @property
    def invalid_sinks(self) -> list[InvalidSink]:
        """Callables told about each invalid item (append to plug one in)."""
        return self.reporter.sinks

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Build from CRAWLFLEET_VALIDATE_FIELDS."""
        rules = get_dict(crawler.settings, "CRAWLFLEET_VALIDATE_FIELDS")
        return cls(rules, stats=crawler.stats)

    def problems(self, item: Any) -> list[Problem]:
        """Everything wrong with *item* (empty: valid)."""
        adapter = ItemAdapter(item)
        found = _spider_problems(adapter.get("_errors"))
        kind = item_type(adapter)
        fields = {**self.rules.get("*", {}), **self.rules.get(kind, {})}
        for name, (type_name, required) in fields.items():
            value = adapter.get(name)
            if is_empty(value):
                if required:
                    found.append(Problem("missing_field", name, f"{name}: required, missing"))
            elif not FIELD_TYPES[type_name](value):
                found.append(
                    Problem(
                        "wrong_type",
                        name,
                        f"{name}: expected {type_name}, got {type(value).__name__} {value!r:.60}",
                    )
                )
        return found

    def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        """Return *item* if valid; otherwise record it and raise ``DropItem``."""
        found = self.problems(item)
        if found:
            raise self.reporter.reject(ItemAdapter(item), found, "validate")
        return item
