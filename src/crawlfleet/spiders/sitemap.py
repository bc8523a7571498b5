"""A sitemap spider whose pages carry their sitemap's ``changefreq`` into a continuous
crawl's revisit history: the adaptive policy then never waits longer than the site says
the page changes (crawlfleet.revisit.policy, ``CHANGEFREQ_SECONDS``).

Scrapy's :class:`~scrapy.spiders.SitemapSpider` reads each ``<url>`` entry's
``changefreq`` but makes its request from ``<loc>`` alone. :class:`RevisitSitemapSpider`
is the same spider (every attribute of Scrapy's: ``sitemap_urls``, ``sitemap_rules``,
``sitemap_follow``, ``sitemap_filter`` ...) whose page requests carry the entry's
``changefreq`` in ``request.meta["crawlfleet_revisit"]["cf"]``. Subclass it instead of
``SitemapSpider``; with ``CRAWLFLEET_REVISIT`` off the value is carried and unused.
A sitemap's ``lastmod`` is not used: a page's own ``Last-Modified`` and the change
fingerprint tell whether it changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from scrapy import Request
from scrapy.http import Response
from scrapy.spiders import SitemapSpider
from w3lib.url import safe_url_string

from crawlfleet.meta import REVISIT_META

__all__ = ["RevisitSitemapSpider"]


class RevisitSitemapSpider(SitemapSpider):
    """:class:`~scrapy.spiders.SitemapSpider` whose page requests carry their entry's
    ``changefreq`` (see the module docstring)."""

    _changefreq: dict[str, str] | None = None

    def sitemap_filter(self, entries: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
        hints = self._changefreq
        for entry in super().sitemap_filter(entries):
            freq = entry.get("changefreq")
            if hints is not None and isinstance(freq, str) and freq.strip() and "loc" in entry:
                hints[safe_url_string(entry["loc"])] = freq.strip().lower()
            yield entry

    def _parse_sitemap(self, response: Response) -> Iterator[Request]:
        # the hints of this sitemap only: Scrapy filters its entries while it builds
        # the requests' list, before the first one is handed out
        hints: dict[str, str] = {}
        self._changefreq = hints
        try:
            requests = list(super()._parse_sitemap(response))
        finally:
            self._changefreq = None
        for request in requests:
            freq = hints.get(request.url)
            if freq is not None and request.callback is not self._parse_sitemap:
                state = request.meta.setdefault(REVISIT_META, {})
                state.setdefault("cf", freq)
            yield request
