"""Small helpers shared by the pipeline stages."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from itemadapter import ItemAdapter

__all__ = [
    "DEFAULT_ITEM_TYPE",
    "describe_error",
    "is_empty",
    "is_internal",
    "item_type",
    "item_url",
    "map_strings",
    "set_field",
]

#: Item type of a plain dict item without a ``_type`` field.
DEFAULT_ITEM_TYPE = "item"


def is_internal(field: str) -> bool:
    """True for fields that pipelines leave alone and stores do not keep (``_html`` ...)."""
    return field.startswith("_")


def item_type(adapter: ItemAdapter) -> str:
    """The item's type: its ``_type`` field, else its class name (Scrapy Items, dataclasses
    ...), else ``"item"`` for plain dicts."""
    declared = adapter.get("_type")
    if isinstance(declared, str) and declared.strip():
        return declared.strip()
    if isinstance(adapter.item, dict):
        return DEFAULT_ITEM_TYPE
    return type(adapter.item).__name__


def item_url(adapter: ItemAdapter) -> str | None:
    """The page URL of the item (its ``url`` field), or None when it has none."""
    value = adapter.get("url")
    return value if isinstance(value, str) and value else None


def is_empty(value: Any) -> bool:
    """True for None, blank strings and empty containers; False for 0 and False."""
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, list | tuple | set | frozenset | dict):
        return len(value) == 0
    return False


def map_strings(value: Any, func: Callable[[str], str]) -> Any:
    """*value* with *func* applied to every string in it, inside lists, tuples and dicts
    too (dict keys are kept). Other values are returned unchanged."""
    if isinstance(value, str):
        return func(value)
    if isinstance(value, list):
        return [map_strings(v, func) for v in value]
    if isinstance(value, tuple):
        return tuple(map_strings(v, func) for v in value)
    if isinstance(value, Mapping):
        return {k: map_strings(v, func) for k, v in value.items()}
    return value


def set_field(adapter: ItemAdapter, field: str, value: Any) -> bool:
    """Set *field*; False when the item class does not declare it (Scrapy Items)."""
    try:
        adapter[field] = value
    except KeyError:
        return False
    return True


def describe_error(exc: BaseException) -> str:
    """A one-line description of a store error (drivers put SQL and parameters in it)."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"
