"""RevisitSitemapSpider: Scrapy's sitemap spider, whose page requests carry their
sitemap entry's changefreq into the revisit history."""

from __future__ import annotations

from scrapy.http import XmlResponse

from crawlfleet.meta import REVISIT_META
from crawlfleet.revisit.policy import changefreq_seconds
from crawlfleet.spiders.sitemap import RevisitSitemapSpider

SITEMAP = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc>http://127.0.0.1:9/news</loc><changefreq>Hourly</changefreq></url>
  <url><loc>http://127.0.0.1:9/about us</loc><changefreq>yearly</changefreq></url>
  <url><loc>http://127.0.0.1:9/plain</loc></url>
</urlset>"""

INDEX = b"""<?xml version="1.0" encoding="UTF-8"?>
<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <sitemap><loc>http://127.0.0.1:9/more.xml</loc></sitemap>
</sitemapindex>"""


class Pages(RevisitSitemapSpider):
    name = "pages"
    sitemap_urls = ("http://127.0.0.1:9/sitemap.xml",)


def _requests(body: bytes, url: str = "http://127.0.0.1:9/sitemap.xml") -> list:
    spider = Pages()
    return list(spider._parse_sitemap(XmlResponse(url, body=body)))


def test_page_requests_carry_their_entrys_changefreq() -> None:
    by_url = {r.url: r for r in _requests(SITEMAP)}
    assert by_url["http://127.0.0.1:9/news"].meta[REVISIT_META] == {"cf": "hourly"}
    # the URL as Scrapy escapes it: the hint still finds its request
    assert by_url["http://127.0.0.1:9/about%20us"].meta[REVISIT_META] == {"cf": "yearly"}
    assert REVISIT_META not in by_url["http://127.0.0.1:9/plain"].meta
    assert changefreq_seconds("hourly") == 3600


def test_a_sitemap_index_gives_sitemap_requests_without_hints() -> None:
    (request,) = _requests(INDEX)
    assert request.url == "http://127.0.0.1:9/more.xml" and REVISIT_META not in request.meta
