"""Typed, validated views of the frontier's settings: the scheduler, queues, leases,
seen-filter, budgets and back-off of a job (:class:`FrontierConfig`), and the checks of
the words they share with the rest (job names, budget scopes, the node's IP)."""

from __future__ import annotations

import ipaddress
import json
import socket
from dataclasses import dataclass
from urllib.parse import urlparse

from scrapy.settings import BaseSettings

from crawlfleet.exceptions import ConfigError
from crawlfleet.frontier.limits import RateLimits
from crawlfleet.frontier.politeness import ScrapyPoliteness
from crawlfleet.frontier.records import MAX_SHARDS, SeenConfig
from crawlfleet.redis.config import redis_url_from
from crawlfleet.redis.scripts import SEEN_MODES
from crawlfleet.settings.access import (
    get_bool,
    get_choice,
    get_dict,
    get_float,
    get_int,
    get_str,
    raw_setting,
)
from crawlfleet.settings.config import check_unknown

__all__ = [
    "BackoffConfig",
    "FrontierConfig",
    "budget_scope",
    "node_ip",
    "rate_limit_margin",
    "validate_job_name",
]

SITE_KEYS = ("host", "domain", "ip")

RATE_LIMIT_SCOPES = ("site", "ip", "type", "type+ip")


@dataclass(frozen=True)
class BackoffConfig:
    """The cluster-wide adaptive back-off of sites (see crawlfleet.middlewares.throttle)."""

    statuses: frozenset[int]
    start_seconds: float
    max_seconds: float
    half_life_seconds: float
    latency_factor: float

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> BackoffConfig:
        statuses: set[int] = set()
        name = "CRAWLFLEET_BACKOFF_STATUSES"
        value = raw_setting(settings, name)
        if isinstance(value, str):  # from -s or the environment: "429,503" or "[429]"
            text = value.strip()
            try:
                value = json.loads(text) if text.startswith("[") else text.split(",")
            except ValueError as exc:
                raise ConfigError(f"{name} must be a list of HTTP statuses: {exc}") from None
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{name} must be a list of HTTP statuses, got {value!r}")
        for raw in (str(v).strip() for v in value if str(v).strip()):
            if not raw.strip().isdigit() or not 100 <= int(raw) <= 599:
                raise ConfigError(
                    f"CRAWLFLEET_BACKOFF_STATUSES must list HTTP statuses, got {raw!r}"
                )
            statuses.add(int(raw))
        start = get_float(settings, "CRAWLFLEET_BACKOFF_START_SECONDS", minimum=0.01)
        longest = get_float(settings, "CRAWLFLEET_BACKOFF_MAX_SECONDS", minimum=0.01)
        if longest < start:
            raise ConfigError(
                "CRAWLFLEET_BACKOFF_MAX_SECONDS must be at least "
                f"CRAWLFLEET_BACKOFF_START_SECONDS, got {longest} and {start}"
            )
        factor = get_float(settings, "CRAWLFLEET_BACKOFF_LATENCY_FACTOR", minimum=0)
        if 0 < factor <= 1:
            raise ConfigError(
                f"CRAWLFLEET_BACKOFF_LATENCY_FACTOR must be 0 (off) or above 1, got {factor}"
            )
        return cls(
            statuses=frozenset(statuses),
            start_seconds=start,
            max_seconds=longest,
            half_life_seconds=get_float(
                settings, "CRAWLFLEET_BACKOFF_HALF_LIFE_SECONDS", minimum=0.1
            ),
            latency_factor=factor,
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
    #: fingerprints the node remembers the seen-filter holding (CRAWLFLEET_SEEN_CACHE_SIZE;
    #: 0: none)
    seen_cache_size: int
    #: shards of a job this node creates (CRAWLFLEET_SHARDS; a job keeps the count it
    #: was created with)
    shards: int
    close_when_finished: bool
    finish_grace_seconds: float
    idle_max_seconds: float
    start_urls_key: str
    start_urls_batch: int
    #: the sites' budgets: CRAWLFLEET_RATE_LIMITS, with the project's DOWNLOAD_DELAY (and
    #: DOWNLOAD_SLOTS delays) for the patterns it does not name
    rate_limits: RateLimits
    #: share of a rate limit's window kept free for late sends (CRAWLFLEET_RATE_LIMIT_MARGIN)
    rate_limit_margin: float
    #: the suffix of this node's rate-limit budgets ("" for the "site" scope)
    budget_scope: str
    #: this node's egress IP (CRAWLFLEET_NODE_IP, else the address it reaches Redis from)
    node_ip: str
    backoff: BackoffConfig
    #: items waiting for item stores that are down past which the node stops leasing
    #: (CRAWLFLEET_ITEMS_PENDING_MAX)
    items_pending_max: int
    #: CRAWLFLEET_RATE_LIMITS as configured (without the project's delays)
    configured_limits: RateLimits
    #: the project's Scrapy politeness settings, as the fleet takes them
    politeness: ScrapyPoliteness

    @property
    def seen(self) -> SeenConfig:
        """The job's seen-filter as these settings describe it."""
        return SeenConfig(self.seen_mode, self.bloom_capacity, self.bloom_error_rate)

    @classmethod
    def from_settings(
        cls, settings: BaseSettings, spider_name: str = "", spider_delay: float | None = None
    ) -> FrontierConfig:
        """*spider_delay*: the spider's ``download_delay`` where this Scrapy reads it
        apart from DOWNLOAD_DELAY (see ScrapyPoliteness.from_settings)."""
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
        margin = rate_limit_margin(settings)
        configured = RateLimits.parse(
            get_dict(settings, "CRAWLFLEET_RATE_LIMITS"),
            source="CRAWLFLEET_RATE_LIMITS",
            margin=margin,
        )
        politeness = ScrapyPoliteness.from_settings(settings, spider_delay)
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
            seen_cache_size=get_int(settings, "CRAWLFLEET_SEEN_CACHE_SIZE", minimum=0),
            shards=get_shards(settings),
            close_when_finished=get_bool(settings, "CRAWLFLEET_CLOSE_WHEN_FINISHED"),
            finish_grace_seconds=get_float(settings, "CRAWLFLEET_FINISH_GRACE_SECONDS", minimum=0),
            idle_max_seconds=get_float(settings, "CRAWLFLEET_IDLE_MAX_SECONDS", minimum=0.1),
            start_urls_key=start_key,
            start_urls_batch=get_int(settings, "CRAWLFLEET_START_URLS_BATCH", minimum=1),
            rate_limits=politeness.budgets(configured, margin),
            rate_limit_margin=margin,
            budget_scope=budget_scope(settings, spider_name or job),
            node_ip=node_ip(settings),
            backoff=BackoffConfig.from_settings(settings),
            items_pending_max=get_int(settings, "CRAWLFLEET_ITEMS_PENDING_MAX", minimum=1),
            configured_limits=configured,
            politeness=politeness,
        )


def get_shards(settings: BaseSettings) -> int:
    """CRAWLFLEET_SHARDS: 1 to MAX_SHARDS."""
    shards = get_int(settings, "CRAWLFLEET_SHARDS", minimum=1)
    if shards > MAX_SHARDS:
        raise ConfigError(f"CRAWLFLEET_SHARDS must be at most {MAX_SHARDS}, got {shards}")
    return shards


def budget_scope(settings: BaseSettings, spider_name: str) -> str:
    """The part CRAWLFLEET_RATE_LIMIT_SCOPE adds to a site's budget name: "" (scope
    "site"), "|type=<type>", "|ip=<ip>" or both."""
    scope = get_choice(settings, "CRAWLFLEET_RATE_LIMIT_SCOPE", RATE_LIMIT_SCOPES)
    suffix = ""
    if "type" in scope:
        kind = get_str(settings, "CRAWLFLEET_CRAWLER_TYPE") or spider_name
        if not kind or any(c in kind for c in "| \t\r\n"):
            raise ConfigError(
                f"CRAWLFLEET_CRAWLER_TYPE must be a name without '|' or whitespace, got {kind!r}"
            )
        suffix += f"|type={kind}"
    if "ip" in scope:
        suffix += f"|ip={node_ip(settings)}"
    return suffix


def node_ip(settings: BaseSettings) -> str:
    """CRAWLFLEET_NODE_IP, else the local address this machine uses to reach Redis
    (found without sending anything: a UDP socket only picks its route)."""
    configured = get_str(settings, "CRAWLFLEET_NODE_IP").strip()
    if configured:
        try:
            return str(ipaddress.ip_address(configured))
        except ValueError:
            raise ConfigError(
                f"CRAWLFLEET_NODE_IP must be an IP address, got {configured!r}"
            ) from None
    url = urlparse(redis_url_from(settings)[0])
    host = url.hostname if url.scheme in ("redis", "rediss") and url.hostname else "127.0.0.1"
    try:
        with socket.socket(
            socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM
        ) as s:
            s.connect((host, url.port or 6379))
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def rate_limit_margin(settings: BaseSettings) -> float:
    """CRAWLFLEET_RATE_LIMIT_MARGIN, checked: above 0, at most 0.5."""
    margin = get_float(settings, "CRAWLFLEET_RATE_LIMIT_MARGIN", minimum=0, strict=True)
    if margin > 0.5:
        raise ConfigError(f"CRAWLFLEET_RATE_LIMIT_MARGIN must be at most 0.5, got {margin}")
    return margin


#: Hash tags of the fleet's own keys (crawlfleet.redis.keys):
#: a job of one of these names would share their keys.
RESERVED_JOB_NAMES = ("polite", "proxies")


def validate_job_name(job: str) -> str:
    """Job names become part of a Redis hash tag and of the manager's URLs: 1-200
    printable characters, no braces, '#', '/' or whitespace, not dots only, none of the
    fleet's own tags. ConfigError (a ValueError) otherwise."""
    if (
        not job
        or len(job) > 200
        or any(c in job for c in "{}#/ ")
        or not job.isprintable()
        or not job.strip(".")
    ):
        raise ConfigError(
            "job name must be 1-200 printable characters without braces, '#', '/' or "
            f"whitespace, and not dots only; got {job[:200]!r}"
        )
    if job in RESERVED_JOB_NAMES:
        raise ConfigError(
            f"job name {job!r} is reserved (the fleet's own keys use it): choose another"
        )
    return job
