"""crawlfleet: a distributed web crawler built on Scrapy and Redis.

Enable it in a Scrapy project with one add-on::

    ADDONS = {"crawlfleet.Addon": 100}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crawlfleet.addon import Addon

__all__ = ["Addon", "__version__"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # the add-on imports Scrapy: loaded when first asked for, so that importing a
    # sub-module (the command line, before it decides what to load) costs nothing
    if name == "Addon":
        from crawlfleet.addon import Addon

        return Addon
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
