"""Proxy rotation from the fleet's shared pool (:mod:`crawlfleet.fleet.proxies`): the
``ProxyRotation`` downloader middleware (enabled by the add-on, off unless
``CRAWLFLEET_PROXY_ENABLED``; a spec's settings can switch it either way) gives every
request the least used proxy that may serve its site now, before Scrapy's
HttpProxyMiddleware (750) turns the proxy URL's credentials into a
``Proxy-Authorization`` header.

Each outcome is classed and counted against the proxy, fleet-wide:

- a **proxy failure** (the download raised: refused, dropped, timed out; or the answer
  is a gateway's: 407, 502, 504): the proxy cools down for
  ``CRAWLFLEET_PROXY_COOLDOWN_SECONDS`` and after ``CRAWLFLEET_PROXY_MAX_FAILURES`` in a
  row it leaves the pool; the request is retried (by the retry middleware, through the
  frontier) with another proxy;
- a **ban** of that proxy by the site (reported by
  :class:`~crawlfleet.middlewares.bans.BanDetector`): the proxy is kept away from that
  site, and only that site, for ``CRAWLFLEET_PROXY_BAN_SECONDS``;
- anything else (a 404, a 500, a page the spider cannot parse) is the page's, not the
  proxy's.

A proxy used ``CRAWLFLEET_PROXY_MAX_USES`` times leaves the pool (0: no limit). When the
pool holds fewer than ``CRAWLFLEET_PROXY_MIN_POOL`` proxies, a provider source is asked
for more (one node at a time). With no proxy able to serve a site, the request is not
sent directly (that would show the crawler's own address): it goes back to the frontier
for ``CRAWLFLEET_PROXY_WAIT_SECONDS`` and the node says so.

Proxies do not multiply a site's budget: politeness is per site in the frontier, not per
download slot, so ten proxies on one site share that site's one rate limit. A request
whose meta already names a ``proxy`` the project chose is left alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response

from crawlfleet.exceptions import ConfigError
from crawlfleet.fleet.proxies import (
    PROVIDER_MAX_BYTES,
    ProxyPool,
    ProxySources,
    parse_provider_answer,
    parse_sources,
    shown,
)
from crawlfleet.frontier.records import DELAY_META
from crawlfleet.middlewares.common import node_of

__all__ = ["GATEWAY_STATUSES", "PROXY_META", "ProxyRotation"]

logger = logging.getLogger(__name__)

#: Request meta: the id of the pool's proxy the request goes through.
PROXY_META = "crawlfleet_proxy"
#: Answers that come from a proxy, not the site.
GATEWAY_STATUSES = frozenset({407, 502, 504})
#: With no proxy available the node says so at most this often.
NONE_LOG_SECONDS = 60.0


class ProxyRotation:
    """See the module docstring."""

    def __init__(self, crawler: Crawler, sources: ProxySources) -> None:
        s = crawler.settings
        self.crawler = crawler
        self.sources = sources
        self.max_uses = s.getint("CRAWLFLEET_PROXY_MAX_USES")
        self.max_failures = s.getint("CRAWLFLEET_PROXY_MAX_FAILURES")
        self.cool_ms = int(s.getfloat("CRAWLFLEET_PROXY_COOLDOWN_SECONDS") * 1000)
        self.ban_ms = int(s.getfloat("CRAWLFLEET_PROXY_BAN_SECONDS") * 1000)
        self.min_pool = s.getint("CRAWLFLEET_PROXY_MIN_POOL")
        self.wait = s.getfloat("CRAWLFLEET_PROXY_WAIT_SECONDS")
        for name, value in (
            ("CRAWLFLEET_PROXY_MAX_USES", self.max_uses),
            ("CRAWLFLEET_PROXY_MIN_POOL", self.min_pool),
        ):
            if value < 0:
                raise ConfigError(f"{name} must be >= 0, got {value}")
        if self.max_failures < 1:
            raise ConfigError(
                f"CRAWLFLEET_PROXY_MAX_FAILURES must be >= 1, got {self.max_failures}"
            )
        if self.cool_ms < 0 or self.ban_ms < 0 or self.wait <= 0:
            raise ConfigError(
                "CRAWLFLEET_PROXY_COOLDOWN_SECONDS and _BAN_SECONDS must be >= 0, "
                "CRAWLFLEET_PROXY_WAIT_SECONDS > 0"
            )
        self.pool: ProxyPool | None = None
        self.stats = crawler.stats
        self._tasks: set[asyncio.Future[Any]] = set()
        self._said_none = 0.0
        self._refilling = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ProxyRotation:
        if not crawler.settings.getbool("CRAWLFLEET_PROXY_ENABLED"):
            raise NotConfigured("CRAWLFLEET_PROXY_ENABLED is off")
        mw = cls(crawler, parse_sources(crawler.settings.get("CRAWLFLEET_PROXIES")))
        crawler.crawlfleet_proxies = mw  # type: ignore[attr-defined]  # for BanDetector
        crawler.signals.connect(mw.spider_opened, signal=signals.spider_opened)
        return mw

    async def spider_opened(self, spider: Spider) -> None:
        scheduler = node_of(self.crawler)
        if scheduler is None:
            raise ConfigError("CRAWLFLEET_PROXY_ENABLED needs the crawlfleet scheduler")
        frontier = scheduler.sync.frontier
        client, keys = getattr(frontier, "client", None), getattr(frontier, "keys", None)
        if client is None or keys is None:
            raise ConfigError("CRAWLFLEET_PROXY_ENABLED needs a Redis frontier")
        self.pool = ProxyPool(client, keys.prefix)
        added, size = await self.pool.add(self.sources.urls)
        if self.sources.provider and size < max(self.min_pool, 1):
            size = await self._refill()
        logger.info(
            "Proxies: %d in the fleet's pool (%d added by this node)%s",
            size,
            added,
            f", provider {shown(self.sources.provider)}" if self.sources.provider else "",
        )

    # -- requests -------------------------------------------------------------------------
    async def process_request(self, request: Request, spider: Spider | None = None) -> Any:
        if self.pool is None or ("proxy" in request.meta and PROXY_META not in request.meta):
            return None  # the project chose this request's proxy (or none)
        scheduler = node_of(self.crawler)
        site = scheduler.site_of(request) if scheduler is not None else ""
        picked = await self.pool.pick(site, max_uses=self.max_uses)
        if picked is None and self.sources.provider:
            await self._refill()
            picked = await self.pool.pick(site, max_uses=self.max_uses)
        if picked is None:
            return self._none_available(request, site)
        request.meta["proxy"] = picked.url
        request.meta[PROXY_META] = picked.id
        self._inc("crawlfleet/proxies/used")
        if self.sources.provider and picked.left < self.min_pool and not self._refilling:
            self._spawn(self._refill())
        return None

    def _none_available(self, request: Request, site: str) -> Request:
        self._inc("crawlfleet/proxies/none_available")
        now = time.monotonic()
        if now - self._said_none >= NONE_LOG_SECONDS:
            self._said_none = now
            logger.warning(
                "Proxies: none may serve %s now (all used up, failed, cooling down or "
                "banned there): its requests wait %.0fs in the frontier, never sent directly",
                site,
                self.wait,
            )
        again = request.replace(dont_filter=True)
        again.meta.pop("proxy", None)
        again.meta.pop(PROXY_META, None)
        again.meta[DELAY_META] = self.wait
        again.meta.pop("is_start_request", None)  # start requests pass the filter once
        return again

    # -- outcomes -------------------------------------------------------------------------
    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Response:
        if PROXY_META in request.meta:
            failed = response.status in GATEWAY_STATUSES
            self._outcome(request, "fail" if failed else "ok")
        return response

    def process_exception(
        self, request: Request, exception: Exception, spider: Spider | None = None
    ) -> None:
        if PROXY_META in request.meta and not isinstance(exception, IgnoreRequest):
            self._outcome(request, "fail")

    def banned(self, request: Request) -> None:
        """The site refused the crawler through this request's proxy (BanDetector)."""
        if PROXY_META in request.meta:
            self._outcome(request, "ban")

    def _outcome(self, request: Request, outcome: str) -> None:
        if self.pool is None:
            return
        scheduler = node_of(self.crawler)
        site = scheduler.site_of(request) if scheduler is not None else ""
        self._inc(f"crawlfleet/proxies/{outcome}")
        self._spawn(self._report(str(request.meta[PROXY_META]), outcome, site))

    async def _report(self, pid: str, outcome: str, site: str) -> None:
        assert self.pool is not None
        result = await self.pool.report(
            pid,
            outcome,
            site,
            cool_ms=self.cool_ms,
            max_failures=self.max_failures,
            ban_ms=self.ban_ms,
        )
        if result == "evicted":
            self._inc("crawlfleet/proxies/evicted")
            logger.info(
                "Proxies: proxy %s left the pool (%d failures in a row)", pid, self.max_failures
            )

    async def _refill(self) -> int:
        """Ask the provider for proxies (if this node is the one to ask now)."""
        assert self.pool is not None
        self._refilling = True
        try:
            if not await self.pool.may_refill():
                return await self.pool.size()
            urls = await asyncio.to_thread(_fetch, self.sources.provider)
            added, size = await self.pool.add(urls)
            self._inc("crawlfleet/proxies/refills")
            logger.info(
                "Proxies: provider %s gave %d proxies, %d new; %d in the pool",
                shown(self.sources.provider),
                len(urls),
                added,
                size,
            )
            return size
        except OSError as exc:
            logger.warning("Proxies: provider %s failed: %s", shown(self.sources.provider), exc)
            return await self.pool.size()
        finally:
            self._refilling = False

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("Proxies: the pool could not be updated: %s", task.exception())

    def _inc(self, key: str) -> None:
        if self.stats is not None:
            self.stats.inc_value(key)


def _fetch(url: str) -> list[str]:
    """The provider's proxies (blocking: run in a thread)."""
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as answer:
        return parse_provider_answer(answer.read(PROVIDER_MAX_BYTES))
