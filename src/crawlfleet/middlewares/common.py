"""What crawlfleet's middlewares share: the site of a request as its node sees it, and
telling Scrapy's robots.txt requests apart (the node itself: node_of in
crawlfleet.parts)."""

from __future__ import annotations

from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.utils.httpobj import urlparse_cached

from crawlfleet.parts import node_of

__all__ = ["first_request", "is_robots", "site_of"]


def site_of(crawler: Crawler | None, request: Request) -> str:
    """The site *request* belongs to: its node's site key (host, domain or IP, as the
    frontier paces it), or its host when no crawlfleet scheduler runs."""
    scheduler = node_of(crawler)
    if scheduler is not None:
        return scheduler.site_of(request)
    return urlparse_cached(request).netloc.lower()


def first_request(request: Request) -> Request:
    """*request* as first sent, before any redirect."""
    redirects = request.meta.get("redirect_urls")
    return request.replace(url=redirects[0]) if redirects else request


def is_robots(request: Request) -> bool:
    """A robots.txt request of Scrapy's RobotsTxtMiddleware (also once redirected, e.g.
    from http to https or to another host)."""
    if not request.meta.get("dont_obey_robotstxt"):
        return False
    return urlparse_cached(first_request(request)).path == "/robots.txt"
