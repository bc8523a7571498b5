"""Spiders written as configuration: spec files, their loader and the spider that runs them.

See ``docs/spec.md`` for the spec format. The public names are imported lazily, so that
``python -m crawlfleet.spiders.schema`` and the spec loader do not pull in Scrapy's
spider machinery.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crawlfleet.spiders.config_spider import SpecSpider
    from crawlfleet.spiders.spec import Spec, SpecError, load_spec

__all__ = ["Spec", "SpecError", "SpecSpider", "load_spec"]

_HOMES = {
    "Spec": "crawlfleet.spiders.spec",
    "SpecError": "crawlfleet.spiders.spec",
    "load_spec": "crawlfleet.spiders.spec",
    "SpecSpider": "crawlfleet.spiders.config_spider",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
