"""What crawlfleet does with a scrapy-redis project's settings (see docs/migration.md).

The add-on takes over the scheduler and the duplicate filter when they name
scrapy-redis classes, whatever their priority, and says so once, in one WARNING that
lists each scrapy-redis setting the project has and what crawlfleet does with it.
"""

from __future__ import annotations

from typing import Any

from scrapy.settings import BaseSettings

from crawlfleet.settings.access import component_path

__all__ = ["NOOP_DUPEFILTER", "SETTINGS", "is_scrapy_redis", "take_over"]

#: The duplicate filter in the place of scrapy-redis's: the frontier's seen-filter does
#: the filtering, and nothing else connects to Redis on its own.
NOOP_DUPEFILTER = "scrapy.dupefilters.BaseDupeFilter"

#: scrapy-redis setting -> what crawlfleet does with it (a value "{}" is put in).
SETTINGS: dict[str, str] = {
    "SCHEDULER": "replaced by crawlfleet's scheduler (the shared frontier)",
    "DUPEFILTER_CLASS": "replaced: the job's seen-filter (CRAWLFLEET_SEEN_MODE) filters",
    "SCHEDULER_DUPEFILTER_CLASS": "not used: the job's seen-filter filters",
    "SCHEDULER_DUPEFILTER_KEY": "not used: the seen-filter is the job's own key "
    "(fingerprints already in {} are not imported)",
    "SCHEDULER_QUEUE_CLASS": "not used: per-site queues, by priority then first in first out",
    "SCHEDULER_QUEUE_KEY": "not used: the job's own queues (requests in {} are not imported)",
    "SCHEDULER_SERIALIZER": "not used: requests are stored as versioned JSON",
    "SCHEDULER_PERSIST": "{}: the job's state always persists when nodes stop; "
    "`crawlfleet job reset JOB` starts it over",
    "SCHEDULER_FLUSH_ON_START": "{}: when True, the job is reset when a node starts "
    "with no other node alive on it, refused otherwise",
    "SCHEDULER_IDLE_BEFORE_CLOSE": "not used: nodes close when the job is finished "
    "(CRAWLFLEET_CLOSE_WHEN_FINISHED)",
    "MAX_IDLE_TIME_BEFORE_CLOSE": "not used: nodes close when the job is finished "
    "(CRAWLFLEET_CLOSE_WHEN_FINISHED)",
    "REDIS_START_URLS_KEY": "read: seeds come from {} (unless the spider has a redis_key)",
    "REDIS_START_URLS_AS_SET": "{}: a list, a set or a sorted set is read by the key's type",
    "REDIS_START_URLS_AS_ZSET": "{}: a list, a set or a sorted set is read by the key's type",
    "REDIS_START_URLS_BATCH_SIZE": "read: {} seeds per batch (unless the spider has "
    "redis_batch_size)",
    "REDIS_ENCODING": "kept: the spider's make_request_from_data decodes seeds with {}",
    "REDIS_ITEMS_KEY": "kept: RedisPipeline writes items to {}",
    "REDIS_ITEMS_SERIALIZER": "kept: RedisPipeline serialises items with it",
    "STATS_CLASS": "kept: Scrapy's stats of each node also go to its Redis hash "
    "(crawlfleet's job figures: `crawlfleet job status`)",
    "STATS_KEY": "kept: RedisStatsCollector writes to {}",
    "REDIS_DECODE_RESPONSES": "kept for the project's own clients",
    "REDIS_URL": "{}",
    "REDIS_HOST": "{}",
    "REDIS_PORT": "{}",
    "REDIS_DB": "{}",
    "REDIS_PARAMS": "{}",
}

_REDIS_LOCATION = ("REDIS_URL", "REDIS_HOST", "REDIS_PORT", "REDIS_DB", "REDIS_PARAMS")


def is_scrapy_redis(value: Any) -> bool:
    """*value* names a class of the scrapy-redis package."""
    return component_path(value).startswith("scrapy_redis.")


def _found(settings: BaseSettings, name: str) -> bool:
    """The project (not Scrapy's or crawlfleet's defaults) set *name*."""
    priority = settings.getpriority(name)
    return priority is not None and priority > 0 and settings.get(name) is not None


def take_over(settings: BaseSettings, redis_source: str, scheduler: str) -> list[str]:
    """Install crawlfleet's *scheduler* (its import path) and a no-op duplicate filter
    over scrapy-redis's (at the priority the project gave them); return one line per
    scrapy-redis setting found, saying what crawlfleet does with it (*redis_source*: the
    setting crawlfleet's Redis URL came from)."""
    lines: list[str] = []
    for name, what in SETTINGS.items():
        if name in ("SCHEDULER", "DUPEFILTER_CLASS"):
            value = settings.get(name)
            if not is_scrapy_redis(value):
                continue
            priority = settings.getpriority(name) or 0
            ours = scheduler if name == "SCHEDULER" else NOOP_DUPEFILTER
            settings.set(name, ours, priority=priority)
            lines.append(f"{name} {component_path(value)}: {what}")
            continue
        if not _found(settings, name):
            continue
        if name == "STATS_CLASS" and not is_scrapy_redis(settings.get(name)):
            continue
        value = settings.get(name)
        if name in _REDIS_LOCATION:
            used = (name == "REDIS_URL") == (redis_source == "REDIS_URL") and redis_source in (
                "REDIS_URL",
                "REDIS_HOST/REDIS_PORT",
            )
            what = (
                "used: crawlfleet's Redis is here (no CRAWLFLEET_REDIS_URL)"
                if used
                else f"kept for the project's own clients; crawlfleet uses {redis_source}"
            )
            lines.append(f"{name}: {what}")
            continue
        shown = value if name != "SCHEDULER_FLUSH_ON_START" else bool(value)
        lines.append(f"{name}: {what.format(shown)}" if "{}" in what else f"{name}: {what}")
    return lines
