"""Typed, validated views of the crawlfleet settings.

Components read their settings through these dataclasses, never with
``settings.get(NAME, default)``: the defaults live in ``default_settings`` only, and a
wrong value stops start-up with a :class:`~crawlfleet.exceptions.ConfigError` naming the
setting.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scrapy.settings import BaseSettings, Settings

from crawlfleet.exceptions import ConfigError
from crawlfleet.frontier.limits import RateLimits
from crawlfleet.settings import default_settings
from crawlfleet.settings.access import (
    defaults,
    get_bool,
    get_choice,
    get_dict,
    get_float,
    get_int,
)

__all__ = ["FrontierConfig", "RedisConfig", "defaults", "settings_with_defaults"]

SITE_KEYS = ("host", "domain", "ip")
SEEN_MODES = ("exact", "bloom")


def settings_with_defaults(values: dict[str, Any] | None = None) -> Settings:
    """A Scrapy ``Settings`` holding crawlfleet's defaults, updated with *values*.

    Used by commands that work without a crawler (seed, job reset, bench).
    """
    settings = Settings()
    settings.setmodule(default_settings, priority="addon")
    env_url = os.environ.get("CRAWLFLEET_REDIS_URL")
    if env_url:
        settings.set("CRAWLFLEET_REDIS_URL", env_url, priority=25)
    for name, value in (values or {}).items():
        settings.set(name, value, priority="cmdline")
    return settings


def check_unknown(settings: BaseSettings) -> None:
    """Reject ``CRAWLFLEET_*`` names that no component reads (a typo would be silent)."""
    known = set(defaults())
    for name in settings:
        if isinstance(name, str) and name.startswith("CRAWLFLEET_") and name not in known:
            close = [k for k in known if k.split("_")[1:2] == name.split("_")[1:2]]
            hint = f" (did you mean {sorted(close)[0]}?)" if close else ""
            raise ConfigError(f"unknown setting {name}{hint}")


@dataclass(frozen=True)
class RedisConfig:
    """Where the shared Redis is, or where the embedded one lives."""

    url: str
    data_dir: Path
    key_prefix: str
    retry_min_seconds: float
    retry_max_seconds: float

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> RedisConfig:
        # the environment variable is installed as a setting by the add-on (priority 25:
        # above settings files, below -s on the command line)
        url = str(settings.get("CRAWLFLEET_REDIS_URL") or "")
        if url and not url.startswith(("redis://", "rediss://", "unix://", "valkey://")):
            raise ConfigError(
                f"CRAWLFLEET_REDIS_URL must start with redis://, rediss:// or unix://, got {url!r}"
            )
        prefix = str(settings.get("CRAWLFLEET_KEY_PREFIX"))
        if not prefix or any(c in prefix for c in "{}: "):
            raise ConfigError(
                f"CRAWLFLEET_KEY_PREFIX must be non-empty without braces, colons or spaces, "
                f"got {prefix!r}"
            )
        lo = get_float(settings, "CRAWLFLEET_REDIS_RETRY_MIN_SECONDS", minimum=0, strict=True)
        hi = get_float(settings, "CRAWLFLEET_REDIS_RETRY_MAX_SECONDS", minimum=lo)
        return cls(
            url=url,
            data_dir=Path(str(settings.get("CRAWLFLEET_DATA_DIR"))),
            key_prefix=prefix,
            retry_min_seconds=lo,
            retry_max_seconds=hi,
        )


@dataclass(frozen=True)
class FrontierConfig:
    """Settings of the scheduler, the queues, leases and the seen-filter."""

    job: str
    site_key: str
    prefetch: int
    lease_seconds: float
    heartbeat_seconds: float
    node_timeout_seconds: float
    reclaim_seconds: float
    flush_seconds: float
    flush_batch: int
    lease_sites: int
    start_requests_once: bool
    seen_mode: str
    bloom_capacity: int
    bloom_error_rate: float
    close_when_finished: bool
    finish_grace_seconds: float
    idle_max_seconds: float
    start_urls_key: str
    start_urls_batch: int
    rate_limits: RateLimits

    @classmethod
    def from_settings(cls, settings: BaseSettings, spider_name: str = "") -> FrontierConfig:
        check_unknown(settings)
        job = str(settings.get("CRAWLFLEET_JOB") or spider_name)
        if not job:
            raise ConfigError("CRAWLFLEET_JOB must be set when the spider has no name")
        validate_job_name(job)
        prefetch = get_int(settings, "CRAWLFLEET_PREFETCH", minimum=0)
        if prefetch == 0:
            prefetch = max(1, settings.getint("CONCURRENT_REQUESTS"))
        lease = get_float(settings, "CRAWLFLEET_LEASE_SECONDS", minimum=1)
        heartbeat = get_float(settings, "CRAWLFLEET_HEARTBEAT_SECONDS", minimum=0.1)
        if heartbeat * 2 > lease:
            raise ConfigError(
                "CRAWLFLEET_HEARTBEAT_SECONDS must be at most half of CRAWLFLEET_LEASE_SECONDS "
                f"(leases are renewed by the heartbeat), got {heartbeat} and {lease}"
            )
        node_timeout = get_float(settings, "CRAWLFLEET_NODE_TIMEOUT_SECONDS", minimum=0.1)
        if node_timeout < heartbeat * 2:
            raise ConfigError(
                "CRAWLFLEET_NODE_TIMEOUT_SECONDS must be at least twice "
                f"CRAWLFLEET_HEARTBEAT_SECONDS, got {node_timeout} and {heartbeat}"
            )
        error_rate = get_float(settings, "CRAWLFLEET_BLOOM_ERROR_RATE", minimum=0, strict=True)
        if error_rate >= 0.5:
            raise ConfigError(f"CRAWLFLEET_BLOOM_ERROR_RATE must be < 0.5, got {error_rate}")
        start_key = str(settings.get("CRAWLFLEET_START_URLS_KEY") or "")
        try:
            start_key = start_key % {"spider": spider_name or job}
        except (KeyError, ValueError, TypeError):
            raise ConfigError(
                f"CRAWLFLEET_START_URLS_KEY may only use %(spider)s, got {start_key!r}"
            ) from None
        return cls(
            job=job,
            site_key=get_choice(settings, "CRAWLFLEET_SITE_KEY", SITE_KEYS),
            prefetch=prefetch,
            lease_seconds=lease,
            heartbeat_seconds=heartbeat,
            node_timeout_seconds=node_timeout,
            reclaim_seconds=get_float(settings, "CRAWLFLEET_RECLAIM_SECONDS", minimum=0.1),
            flush_seconds=get_float(settings, "CRAWLFLEET_FLUSH_SECONDS", minimum=0.001),
            flush_batch=get_int(settings, "CRAWLFLEET_FLUSH_BATCH", minimum=1),
            lease_sites=get_int(settings, "CRAWLFLEET_LEASE_SITES", minimum=1),
            start_requests_once=get_bool(settings, "CRAWLFLEET_START_REQUESTS_ONCE"),
            seen_mode=get_choice(settings, "CRAWLFLEET_SEEN_MODE", SEEN_MODES),
            bloom_capacity=get_int(settings, "CRAWLFLEET_BLOOM_CAPACITY", minimum=1000),
            bloom_error_rate=error_rate,
            close_when_finished=get_bool(settings, "CRAWLFLEET_CLOSE_WHEN_FINISHED"),
            finish_grace_seconds=get_float(settings, "CRAWLFLEET_FINISH_GRACE_SECONDS", minimum=0),
            idle_max_seconds=get_float(settings, "CRAWLFLEET_IDLE_MAX_SECONDS", minimum=0.1),
            start_urls_key=start_key,
            start_urls_batch=get_int(settings, "CRAWLFLEET_START_URLS_BATCH", minimum=1),
            rate_limits=RateLimits.parse(
                get_dict(settings, "CRAWLFLEET_RATE_LIMITS"), source="CRAWLFLEET_RATE_LIMITS"
            ),
        )


def validate_job_name(job: str) -> str:
    """Job names become part of a Redis hash tag: no braces, no whitespace."""
    if not job or any(c in job for c in "{} \t\r\n") or len(job) > 200:
        raise ConfigError(
            f"job name must be 1-200 characters without braces or whitespace, got {job!r}"
        )
    return job
