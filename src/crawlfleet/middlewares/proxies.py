"""Proxy rotation from the fleet's shared pool (:mod:`crawlfleet.fleet.proxies`): the
``ProxyRotation`` downloader middleware (enabled by the add-on, off unless
``CRAWLFLEET_PROXY_ENABLED``; a spec's settings can switch it either way) gives every
request the least used proxy that may serve its site now, before Scrapy's
HttpProxyMiddleware (750) turns the proxy URL's credentials into a
``Proxy-Authorization`` header.

Each outcome is classed and counted against the proxy, fleet-wide:

- the **proxy is dead** (it refused the connection, its host is unknown, it refused the
  tunnel or its credentials: 407): it rests for ``CRAWLFLEET_PROXY_COOLDOWN_SECONDS``,
  and after ``CRAWLFLEET_PROXY_MAX_FAILURES`` in a row it leaves the pool;
- a **failure that may be the site's** (timed out, dropped, a 502/504 gateway answer):
  the proxy rests for that site only, and after ``CRAWLFLEET_PROXY_MAX_FAILURES`` in a
  row there it is kept away from that site as after a ban; a site that is down does not
  empty the fleet's pool;
- a **ban** of that proxy by the site (reported by
  :class:`~crawlfleet.middlewares.bans.BanDetector`; not counted as a success): the proxy
  is kept away from that site, and only that site, for ``CRAWLFLEET_PROXY_BAN_SECONDS``;
- anything else (a 404, a 500, a page the spider cannot parse) is the page's, not the
  proxy's.

A failed request is retried (by the retry middleware, through the frontier) with
another proxy.

A proxy used ``CRAWLFLEET_PROXY_MAX_USES`` times leaves the pool (0: no limit). When the
pool holds fewer than ``CRAWLFLEET_PROXY_MIN_POOL`` proxies, a provider source is asked
for more (one node at a time). With no proxy able to serve a site, the request is not
sent directly (that would show the crawler's own address): it goes back to the frontier
for ``CRAWLFLEET_PROXY_WAIT_SECONDS`` and the node says so; after ``MAX_WAITS`` such
waits it fails (``NoProxy``, in the error registry), so that a job can end. Robots.txt
requests wait in the node instead (the engine fetches them directly), and are given up
after ``ROBOTS_WAITS`` waits. The proxy, its credentials and their header are never
stored with a request (in Redis or the error registry): each try picks again.

Proxies do not multiply a site's budget: politeness is per site in the frontier, not per
download slot, so ten proxies on one site share that site's one rate limit. A request
whose meta already names a ``proxy`` the project chose is left alone. With
``CRAWLFLEET_SESSIONS`` a session keeps its proxy (picked once: its uses count
sessions), and a failure or ban of that proxy ends the session.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Any

from scrapy import Request, Spider, signals
from scrapy.core.downloader.handlers.http11 import TunnelError
from scrapy.crawler import Crawler
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    IgnoreRequest,
    NotConfigured,
)
from scrapy.http import Response
from twisted.internet.error import ConnectionRefusedError, DNSLookupError

from crawlfleet.exceptions import ConfigError
from crawlfleet.fleet.proxies import (
    PROVIDER_MAX_BYTES,
    PickedProxy,
    ProxyPool,
    ProxySources,
    has_secret,
    parse_provider_answer,
    parse_sources,
    proxy_sealer,
    shown,
)
from crawlfleet.meta import DELAY_META, POOL_PROXY_META, PROXY_WAITS_META, SESSION_META
from crawlfleet.middlewares.common import is_robots, site_of
from crawlfleet.parts import node_of, parts_of

__all__ = ["GATEWAY_STATUSES", "NoProxy", "ProxyRotation"]

logger = logging.getLogger(__name__)

#: A request that waited this many times for a proxy fails (in the error registry).
MAX_WAITS = 30
#: Exceptions that say the proxy itself is dead (not the site): Scrapy's own (2.13 and
#: later) and Twisted's, which older handlers raise.
DEAD = (
    DownloadConnectionRefusedError,
    CannotResolveHostError,
    ConnectionRefusedError,
    DNSLookupError,
    TunnelError,
)
#: Answers that come from a proxy, not the site (407: its credentials were refused, the
#: proxy's own failure; 502 and 504: it could not reach the site, maybe the site's).
GATEWAY_STATUSES = frozenset({407, 502, 504})


class NoProxy(IgnoreRequest):
    """No proxy could serve the request's site for ``MAX_WAITS`` waits."""


#: With no proxy available the node says so at most this often.
NONE_LOG_SECONDS = 60.0
#: A robots.txt request waits for a proxy at most so many times.
ROBOTS_WAITS = 6
#: Sessions whose proxy a node remembers at most (least recently used forgotten).
MAX_SESSIONS = 10_000


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
        # a provider's proxies may come with credentials: the key is made for them too
        may_hold = bool(sources.provider) or any(has_secret(u) for u in sources.urls)
        self.sealer = proxy_sealer(crawler.settings, create=may_hold)
        self.stats = crawler.stats
        self._tasks: set[asyncio.Future[Any]] = set()
        self._said_none = 0.0
        self._refilling = False
        #: session -> its proxy (CRAWLFLEET_SESSIONS: one proxy per session)
        self._by_session: OrderedDict[str, PickedProxy] = OrderedDict()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ProxyRotation:
        if not crawler.settings.getbool("CRAWLFLEET_PROXY_ENABLED"):
            raise NotConfigured  # CRAWLFLEET_PROXY_ENABLED is off (no message: Scrapy warns of one)
        mw = cls(crawler, parse_sources(crawler.settings.get("CRAWLFLEET_PROXIES")))
        parts_of(crawler).proxies = mw  # for BanDetector
        crawler.signals.connect(mw.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(mw.spider_closed, signal=signals.spider_closed)
        return mw

    async def spider_opened(self, spider: Spider) -> None:
        node = node_of(self.crawler)
        shared = node.shared_redis() if node is not None else None
        if shared is None:
            # no pool: every request waits in the frontier (process_request), none is
            # sent directly
            logger.error("CRAWLFLEET_PROXY_ENABLED needs the crawlfleet scheduler on Redis")
            return
        # credentials go to Redis sealed, with the key the manager and every node share
        pool = ProxyPool(*shared, self.sealer)
        added, size = await pool.add(self.sources.urls)
        self.pool = pool
        if self.sources.provider and size < max(self.min_pool, 1):
            size = await self._refill()
        logger.info(
            "Proxies: %d in the fleet's pool (%d added by this node)%s",
            size,
            added,
            f", provider {shown(self.sources.provider)}" if self.sources.provider else "",
        )

    async def spider_closed(self, spider: Spider) -> None:
        if self._tasks:  # the last outcomes, before the Redis client closes
            await asyncio.wait(list(self._tasks), timeout=5)

    # -- requests -------------------------------------------------------------------------
    async def process_request(self, request: Request, spider: Spider | None = None) -> Any:
        if "proxy" in request.meta and POOL_PROXY_META not in request.meta:
            return None  # the project chose this request's proxy (or none)
        site = site_of(self.crawler, request)
        session = request.meta.get(SESSION_META)
        if session is not None and session in self._by_session:
            kept = self._by_session[session]  # a session keeps its proxy
            request.meta["proxy"] = kept.url
            request.meta[POOL_PROXY_META] = kept.id
            self._by_session.move_to_end(session)
            return None
        picked: PickedProxy | None = None
        for _ in range(ROBOTS_WAITS if is_robots(request) else 1):
            picked = await self._pick(site)
            if picked is not None or not is_robots(request):
                break
            # robots.txt is fetched by the engine directly (a returned request would
            # be fetched again at once): it waits here, then is given up (allow all)
            await asyncio.sleep(self.wait)
        if picked is None:
            if is_robots(request):
                raise NoProxy(f"no proxy could serve {site} for its robots.txt")
            return self._none_available(request, site)
        request.meta["proxy"] = picked.url
        request.meta[POOL_PROXY_META] = picked.id
        if session is not None:
            self._by_session[str(session)] = picked
            if len(self._by_session) > MAX_SESSIONS:
                self._by_session.popitem(last=False)
        self._inc("crawlfleet/proxies/used")
        if self.sources.provider and picked.left < self.min_pool and not self._refilling:
            self._spawn(self._refill())
        return None

    async def _pick(self, site: str) -> PickedProxy | None:
        if self.pool is None:
            return None
        picked = await self.pool.pick(site, max_uses=self.max_uses)
        if picked is None and self.sources.provider:
            await self._refill()
            picked = await self.pool.pick(site, max_uses=self.max_uses)
        return picked

    def _none_available(self, request: Request, site: str) -> Request:
        waits = int(request.meta.get(PROXY_WAITS_META, 0)) + 1
        if waits > MAX_WAITS:
            failures = parts_of(self.crawler).failures
            detail = f"NoProxy: no proxy could serve {site} after {MAX_WAITS} waits"
            if failures is not None:
                failures.record(request, "exception", detail)
            self._inc("crawlfleet/proxies/gave_up")
            raise NoProxy(f"{request.url}: {detail}")
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
        again.meta.pop(POOL_PROXY_META, None)
        again.meta[DELAY_META] = self.wait
        again.meta[PROXY_WAITS_META] = waits
        again.meta.pop("is_start_request", None)  # start requests pass the filter once
        return again

    # -- outcomes -------------------------------------------------------------------------
    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Response:
        if POOL_PROXY_META not in request.meta:
            return response
        if response.status == 407:
            self._outcome(request, "dead")
        elif response.status in GATEWAY_STATUSES:
            self._outcome(request, "fail")
        else:
            bans = parts_of(self.crawler).bans
            if bans is None or bans.why_banned(request, response) is None:
                self._outcome(request, "ok")  # a ban is reported by BanDetector
        return response

    def process_exception(
        self, request: Request, exception: Exception, spider: Spider | None = None
    ) -> None:
        if POOL_PROXY_META in request.meta and not isinstance(exception, IgnoreRequest):
            self._outcome(request, "dead" if isinstance(exception, DEAD) else "fail")

    def banned(self, request: Request) -> None:
        """The site refused the crawler through this request's proxy (BanDetector)."""
        if POOL_PROXY_META in request.meta:
            self._outcome(request, "ban")

    def _outcome(self, request: Request, outcome: str) -> None:
        if self.pool is None:
            return
        session = request.meta.get(SESSION_META)
        if session is not None and outcome != "ok":
            # the session's proxy failed or was refused: the session ends with it (a new
            # jar, identity and proxy; never the old cookies from a new address)
            self._by_session.pop(str(session), None)
            sessions = parts_of(self.crawler).sessions
            if sessions is not None:
                sessions.end(str(session))
        site = site_of(self.crawler, request)
        self._inc(f"crawlfleet/proxies/{outcome}")
        self._spawn(self._report(str(request.meta[POOL_PROXY_META]), outcome, site))

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
