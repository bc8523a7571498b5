"""The bundled test website: a deterministic, fast site on loopback for the demo, the
tests and the benchmarks.

- :mod:`.model`: what the site contains (:class:`SiteModel`), the ground truth;
- :mod:`.server`: serving it (:class:`SiteServer`, :class:`TestSite` for tests);
- :mod:`.process`: serving it from a child process (benchmarks);
- :mod:`.spider`: a vanilla Scrapy spider that crawls it completely.
"""

from __future__ import annotations

from crawlfleet.testsite.model import Article, EncodingCase, Link, Product, SiteModel
from crawlfleet.testsite.process import (
    fetch_stats,
    reset_stats,
    start_site_process,
    stop_site_process,
)
from crawlfleet.testsite.server import SiteServer, TestSite

__all__ = [
    "Article",
    "EncodingCase",
    "Link",
    "Product",
    "SiteModel",
    "SiteServer",
    "TestSite",
    "fetch_stats",
    "reset_stats",
    "start_site_process",
    "stop_site_process",
]
