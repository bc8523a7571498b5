"""scrapy-redis spiders on a crawlfleet node: where their start URLs are, and their
own reading of them switched off.

A ``RedisSpider`` or ``RedisCrawlSpider`` reads its start-URL key itself: at start
(``start_requests``) and whenever it is idle, from a handler of Scrapy's
``spider_idle`` signal that also keeps the spider open for ever (DontCloseSpider)
unless MAX_IDLE_TIME_BEFORE_CLOSE says otherwise. On a node, the key is read by the
node's seed reader (:mod:`crawlfleet.node.seeds`), through the frontier: the spider's
own reading is off (its ``next_requests`` gives nothing, its idle handler is
disconnected), so nothing it fetches bypasses the seen-filter, and the node closes when
the job is finished. Its ``make_request_from_data`` still makes the requests.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from scrapy import Spider, signals
from scrapy.crawler import Crawler
from scrapy.settings import BaseSettings

from crawlfleet.exceptions import ConfigError
from crawlfleet.settings.access import get_int

__all__ = ["SeedSource", "adopt", "is_redis_spider", "seed_source"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SeedSource:
    """Where a node reads seeds: *key* ("" for nowhere), *batch* entries at a time;
    *origin* says which setting or attribute named it."""

    key: str
    batch: int
    origin: str


def is_redis_spider(spider: object) -> bool:
    """*spider* is a scrapy-redis spider (``RedisMixin``: RedisSpider, RedisCrawlSpider)."""
    module = sys.modules.get("scrapy_redis.spiders")
    mixin = getattr(module, "RedisMixin", None)
    return mixin is not None and isinstance(spider, mixin)


def _format(key: str, name: str, where: str) -> str:
    try:
        return key % {"name": name, "spider": name}
    except (KeyError, ValueError, TypeError):
        raise ConfigError(f"{where} may only use %(name)s, got {key!r}") from None


def seed_source(spider: Spider | None, settings: BaseSettings, default_key: str) -> SeedSource:
    """Where *spider* reads its start URLs, as scrapy-redis would: its ``redis_key``
    (attribute or ``-a redis_key=``), else REDIS_START_URLS_KEY, else *default_key*
    (CRAWLFLEET_START_URLS_KEY, "" for none), each formatted with the spider's name;
    batches of its ``redis_batch_size``, else REDIS_START_URLS_BATCH_SIZE, else
    CRAWLFLEET_START_URLS_BATCH."""
    name = getattr(spider, "name", "") or ""
    attribute = getattr(spider, "redis_key", None)
    if attribute:
        key, origin = _format(str(attribute), name, "the spider's redis_key"), "redis_key"
    elif settings.get("REDIS_START_URLS_KEY"):
        raw = str(settings.get("REDIS_START_URLS_KEY"))
        key, origin = _format(raw, name, "REDIS_START_URLS_KEY"), "REDIS_START_URLS_KEY"
    else:
        key, origin = default_key, "CRAWLFLEET_START_URLS_KEY"
    size = getattr(spider, "redis_batch_size", None)
    if size is None and settings.get("REDIS_START_URLS_BATCH_SIZE") is not None:
        size = settings.get("REDIS_START_URLS_BATCH_SIZE")
    if size is None:
        batch = get_int(settings, "CRAWLFLEET_START_URLS_BATCH", minimum=1)
    else:
        try:
            batch = int(size)
        except (TypeError, ValueError):
            batch = 0
        if batch < 1:
            raise ConfigError(
                f"the spider's redis_batch_size must be an integer >= 1, got {size!r}"
            )
    return SeedSource(key, batch, origin)


def _nothing() -> Iterator[Any]:
    return iter(())


def adopt(crawler: Crawler, spider: Spider) -> bool:
    """Switch off a scrapy-redis spider's own reading of its key (see the module
    docstring); False, doing nothing, for any other spider."""
    if not is_redis_spider(spider):
        return False
    handler = getattr(spider, "spider_idle", None)
    if handler is not None:
        crawler.signals.disconnect(handler, signal=signals.spider_idle)
    # start_requests() and the idle handler read the key through next_requests()
    spider.next_requests = _nothing  # type: ignore[attr-defined]
    return True
