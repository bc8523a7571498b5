"""What the crawlfleet scheduler needs from Scrapy's engine, looked up in one place.

Some of these are engine internals with no public equivalent (the slot's set of
requests in progress and its wake-up call, whether start requests are still being
read); each is looked up defensively, with the older attribute names as fallback.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, fields
from typing import Any

from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.defer import Deferred

__all__ = ["EngineHooks", "engine_hooks", "is_stopping", "no_process_delay", "spider_delay"]


#: Hosts whose robots.txt a node reads ahead, remembered (then forgotten all at once).
WARMED_MAX = 10_000


def _nothing(*_args: Any) -> None:
    return None


@dataclass
class EngineHooks:
    """Callables into the engine; the defaults do nothing (a scheduler used without a
    crawler, as in tests and tools)."""

    #: the requests the engine has in progress (a request leaves this set only once it
    #: is fully processed); None when the engine has no slot (not open, or closed)
    inprogress: Callable[[], Collection[Request] | None] = _nothing
    #: make the engine ask the scheduler for requests again
    wake: Callable[[], None] = _nothing
    #: whether the engine is still reading the spider's start requests
    starting: Callable[[], bool] = lambda: False
    #: send ``request_dropped`` for a request the scheduler refused
    dropped: Callable[[Request], None] = _nothing
    #: let the downloader run at most this many requests at once
    set_concurrency: Callable[[int], None] = _nothing
    #: close the spider with this reason (returns at once; the close runs after)
    close: Callable[[str], None] = _nothing
    #: whether the downloader would start this request at once (its download slot has
    #: a free place and nothing queued), rather than queue it behind others
    starts_now: Callable[[Request], bool] = lambda request: True
    #: have Scrapy's RobotsTxtMiddleware read this request's robots.txt now (once per
    #: host), so that it is known by the time the request goes out
    warm_robots: Callable[[Request], None] = _nothing
    #: build the download handlers of http and https now, not on the first request
    #: (which would go out late by the time that takes)
    load_handlers: Callable[[], None] = _nothing
    _pending: list[asyncio.Future[None]] = field(default_factory=list)

    def bind(self, other: EngineHooks) -> None:
        """Call *other*'s engine from now on: every part that holds this object does."""
        for hook in fields(self):
            setattr(self, hook.name, getattr(other, hook.name))


def _slot_of(crawler: Crawler) -> Any:
    engine = crawler.engine
    return getattr(engine, "_slot", None) or getattr(engine, "slot", None)


def is_stopping(crawler: Crawler) -> bool:
    """Whether *crawler* is stopping: asked to stop (Ctrl-C, SIGTERM), or its spider is
    being closed (a control command, the job finished). Safe from any thread."""
    if not crawler.crawling:
        return True
    s = _slot_of(crawler)
    return s is not None and bool(getattr(s, "closing", False))


def engine_hooks(crawler: Crawler) -> EngineHooks:
    """The hooks of *crawler*'s engine (looked up at each call: the engine and its slot
    come and go with the crawl)."""
    hooks = EngineHooks()

    def slot() -> Any:
        return _slot_of(crawler)

    def inprogress() -> Collection[Request] | None:
        s = slot()
        return None if s is None else s.inprogress

    def wake() -> None:
        s = slot()
        if s is not None:
            s.nextcall.schedule()

    def starting() -> bool:
        return getattr(crawler.engine, "_start", None) is not None

    def dropped(request: Request) -> None:
        crawler.signals.send_catch_log(
            signals.request_dropped, request=request, spider=crawler.spider
        )

    def set_concurrency(n: int) -> None:
        downloader = getattr(crawler.engine, "downloader", None)
        if downloader is not None:
            downloader.total_concurrency = n

    def close(reason: str) -> None:
        engine = crawler.engine
        closer = getattr(engine, "close_spider_async", None)
        if closer is not None:  # Scrapy >= 2.14
            hooks._pending.append(asyncio.ensure_future(closer(reason=reason)))
        elif crawler.spider is not None:
            engine.close_spider(crawler.spider, reason)

    def starts_now(request: Request) -> bool:
        downloader = getattr(crawler.engine, "downloader", None)
        slots = getattr(downloader, "slots", None)
        if downloader is None or not isinstance(slots, dict):
            return True
        slot = slots.get(downloader.get_slot_key(request))
        if slot is None:
            return True
        return not slot.queue and slot.free_transfer_slots() > 0 and slot.latercall is None

    warmed: set[str] = set()

    def warm_robots(request: Request) -> None:
        netloc = urlparse_cached(request).netloc
        if netloc in warmed:
            return
        if len(warmed) >= WARMED_MAX:
            warmed.clear()
        warmed.add(netloc)
        downloader = getattr(crawler.engine, "downloader", None)
        manager = getattr(downloader, "middleware", None)
        for mw in getattr(manager, "middlewares", ()):
            if isinstance(mw, RobotsTxtMiddleware):
                try:
                    found: Any = mw.robot_parser(request)
                except TypeError:  # Scrapy < 2.14: robot_parser(request, spider)
                    found = mw.robot_parser(request, crawler.spider)  # type: ignore[call-arg]
                if inspect.iscoroutine(found):
                    task = asyncio.ensure_future(found)
                    task.add_done_callback(_quiet)
                elif isinstance(found, Deferred):
                    found.addErrback(lambda _failure: None)

    hooks.inprogress, hooks.wake, hooks.starting = inprogress, wake, starting
    hooks.dropped, hooks.set_concurrency, hooks.close = dropped, set_concurrency, close

    def load_handlers() -> None:
        handlers = getattr(getattr(crawler.engine, "downloader", None), "handlers", None)
        get = getattr(handlers, "_get_handler", None)
        if get is not None:
            for scheme in ("http", "https"):
                get(scheme)

    hooks.starts_now, hooks.warm_robots = starts_now, warm_robots
    hooks.load_handlers = load_handlers
    return hooks


def _quiet(task: asyncio.Future[Any]) -> None:
    """A robots.txt read ahead failed: the middleware says so when the request comes."""
    if not task.cancelled():
        task.exception()


def spider_delay(crawler: Crawler) -> float | None:
    """The spider's ``download_delay`` where this Scrapy reads it apart from the
    DOWNLOAD_DELAY setting (before 2.19, whose crawler makes it that setting); else
    None."""
    if hasattr(crawler, "_apply_deprecated_spider_attr"):
        return None  # Scrapy >= 2.19: already in DOWNLOAD_DELAY, as Scrapy ranks it
    value = getattr(crawler.spider, "download_delay", None)
    return float(value) if isinstance(value, int | float) else None


def no_process_delay(crawler: Crawler) -> None:
    """Turn off the downloader's per-process delay (DOWNLOAD_DELAY, a spider's
    ``download_delay``, DOWNLOAD_SLOTS delays) before its first slot is made: under
    crawlfleet the frontier's slots pace a site for the whole fleet."""
    downloader = getattr(crawler.engine, "downloader", None)
    if downloader is not None:
        if hasattr(downloader, "_delay"):  # Scrapy >= 2.19: the delay of new slots
            downloader._delay = 0.0
        elif crawler.spider is not None:
            # before 2.19 a new slot takes the spider's download_delay over the setting
            crawler.spider.download_delay = 0.0  # type: ignore[attr-defined]
        per_slot = getattr(downloader, "per_slot_settings", None)
        if isinstance(per_slot, dict):
            downloader.per_slot_settings = {
                key: {**entry, "delay": 0.0} if isinstance(entry, dict) else entry
                for key, entry in per_slot.items()
            }
        for slot in getattr(downloader, "slots", {}).values():
            slot.delay = 0.0
