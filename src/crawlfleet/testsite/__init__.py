"""The bundled test website: a deterministic, fast site on loopback for the demo, the
tests and the benchmarks.

- :mod:`.model`: what the site contains (:class:`SiteModel`), the ground truth;
- :mod:`.archive`: its optional date x category archive;
- :mod:`.hostile`: hostile mode (:class:`Hostile`: bans, flaky URLs, captchas);
- :mod:`.changing`: changing mode (:class:`Changing`: pages that change on known
  schedules), :mod:`.changelog`: its freshness figures (:class:`ChangeStats`);
- :mod:`.server`: serving it (:class:`SiteServer`, :class:`TestSite` for tests);
- :mod:`.process`: serving it from a child process (benchmarks);
- :mod:`.spider`: a vanilla Scrapy spider that crawls it completely.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "Article",
    "ChangeStats",
    "Changing",
    "EncodingCase",
    "Hostile",
    "Link",
    "Product",
    "SiteModel",
    "SiteServer",
    "TestSite",
    "fetch_change_stats",
    "fetch_stats",
    "reset_stats",
    "start_site_process",
    "stop_site_process",
]

#: name -> the submodule that defines it, imported on first use: a node that imports
#: only the spider does not load the site's server (aiohttp) and process helpers
_HOMES = {
    **dict.fromkeys(("Article", "EncodingCase", "Link", "Product", "SiteModel"), "model"),
    **dict.fromkeys(("SiteServer", "TestSite"), "server"),
    "Hostile": "hostile",
    "Changing": "changing",
    "ChangeStats": "changelog",
    **dict.fromkeys(
        (
            "fetch_change_stats",
            "fetch_stats",
            "reset_stats",
            "start_site_process",
            "stop_site_process",
        ),
        "process",
    ),
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
