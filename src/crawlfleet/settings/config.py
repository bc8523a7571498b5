"""Typed, validated views of the crawlfleet settings.

Components read their settings through these dataclasses, never with
``settings.get(NAME, default)``: the defaults live in ``default_settings`` only, and a
wrong value stops start-up with a :class:`~crawlfleet.exceptions.ConfigError` naming the
setting.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse, urlsplit, urlunsplit

from scrapy.settings import BaseSettings, Settings

from crawlfleet.exceptions import ConfigError
from crawlfleet.frontier.limits import RateLimits
from crawlfleet.frontier.records import MAX_SHARDS, SeenConfig
from crawlfleet.settings import default_settings
from crawlfleet.settings.access import (
    defaults,
    get_bool,
    get_choice,
    get_dict,
    get_float,
    get_int,
    get_str,
    raw_setting,
)
from crawlfleet.settings.politeness import ScrapyPoliteness

__all__ = [
    "ENV_PRIORITY",
    "FrontierConfig",
    "RedisConfig",
    "apply_defaults",
    "check_unknown",
    "defaults",
    "redact_url",
    "redis_url_from",
    "settings_with_defaults",
]

SITE_KEYS = ("host", "domain", "ip")
SEEN_MODES = ("exact", "bloom")


_SECRET_IN_URL = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s]+@", re.IGNORECASE)


def redact_url(text: str) -> str:
    """*text* with the password of every URL in it replaced by ``***``."""
    return _SECRET_IN_URL.sub(r"\1***@", text)


def settings_with_defaults(values: dict[str, Any] | None = None) -> Settings:
    """A Scrapy ``Settings`` holding crawlfleet's defaults, updated with *values*.

    Used by commands that work without a crawler (seed, job reset, bench).
    """
    settings = Settings()
    apply_defaults(settings)
    for name, value in (values or {}).items():
        settings.set(name, value, priority="cmdline")
    return settings


#: Where the environment's ``CRAWLFLEET_REDIS_URL`` goes: above settings files
#: ("project", 20), below spiders' custom_settings (30) and the command line (40).
ENV_PRIORITY = 25
#: Settings that the environment variable of the same name sets.
ENV_SETTINGS = ("CRAWLFLEET_REDIS_URL", "CRAWLFLEET_STATE_DB_URL", "CRAWLFLEET_SECRET_KEY")


def apply_defaults(settings: BaseSettings) -> None:
    """Install crawlfleet's defaults below a project's own settings ("addon" priority)
    and the environment's ENV_SETTINGS (``CRAWLFLEET_REDIS_URL``,
    ``CRAWLFLEET_STATE_DB_URL``) above them: the one rule that the add-on and every
    command follow."""
    settings.setmodule(default_settings, priority="addon")
    for name in ENV_SETTINGS:
        value = os.environ.get(name)
        if value:
            settings.set(name, value, priority=ENV_PRIORITY)


def check_unknown(settings: BaseSettings) -> None:
    """Reject ``CRAWLFLEET_*`` names that no component reads (a typo would be silent)."""
    known = set(defaults())
    for name in settings:
        if isinstance(name, str) and name.startswith("CRAWLFLEET_") and name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"unknown setting {name}{hint}")


#: REDIS_PARAMS that only tune scrapy-redis's client: crawlfleet's has its own.
_CLIENT_TUNING = frozenset(
    {
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "retry_on_timeout",
        "health_check_interval",
        "encoding",
        "encoding_errors",
        "decode_responses",
        "client_name",
        "redis_cls",
        "max_connections",
    }
)


def redis_url_from(settings: BaseSettings) -> tuple[str, str]:
    """crawlfleet's Redis URL and the setting it came from: CRAWLFLEET_REDIS_URL, else
    scrapy-redis's REDIS_URL (with the password and username of REDIS_PARAMS when it has
    none), else its REDIS_HOST/REDIS_PORT (with REDIS_DB and the password, username, db
    and ssl of REDIS_PARAMS), else ("", "embedded").
    ConfigError for REDIS_PARAMS that a URL cannot say."""
    own = str(settings.get("CRAWLFLEET_REDIS_URL") or "")
    if own:
        return own, "CRAWLFLEET_REDIS_URL"
    try:
        params = dict(settings.getdict("REDIS_PARAMS"))
    except ValueError:
        raise ConfigError("REDIS_PARAMS must be a dict") from None
    user, password = params.get("username"), params.get("password")
    auth = ""
    if user or password:
        auth = f"{quote(str(user or ''), safe='')}:{quote(str(password or ''), safe='')}@"
    url = str(settings.get("REDIS_URL") or "")
    if url:
        parts = urlsplit(url)
        if auth and parts.scheme in ("redis", "rediss") and "@" not in parts.netloc:
            # scrapy-redis passes REDIS_PARAMS to its client: they fill what the URL lacks
            url = urlunsplit(parts._replace(netloc=auth + parts.netloc))
        return url, "REDIS_URL"
    if not (settings.get("REDIS_HOST") or settings.get("REDIS_PORT")):
        return "", "embedded"
    unknown = sorted(set(params) - _CLIENT_TUNING - {"password", "username", "db", "ssl"})
    if unknown:
        raise ConfigError(
            f"REDIS_PARAMS has {', '.join(unknown)}, which crawlfleet cannot take: set "
            "CRAWLFLEET_REDIS_URL (redis://[user:password@]host:port/db, rediss:// for TLS)"
        )
    host = str(settings.get("REDIS_HOST") or "localhost")
    port = settings.get("REDIS_PORT") or 6379
    db = settings.get("REDIS_DB") or params.get("db") or 0
    scheme = "rediss" if params.get("ssl") else "redis"
    host = f"[{host}]" if ":" in host else host
    try:
        return f"{scheme}://{auth}{host}:{int(port)}/{int(db)}", "REDIS_HOST/REDIS_PORT"
    except (TypeError, ValueError):
        raise ConfigError(
            f"REDIS_PORT and REDIS_DB must be integers, got {port!r} and {db!r}"
        ) from None


@dataclass(frozen=True)
class RedisConfig:
    """Where the shared Redis is, or where the embedded one lives."""

    url: str
    data_dir: Path
    key_prefix: str
    retry_min_seconds: float
    retry_max_seconds: float
    #: how long a starting node tries to reach Redis (seconds)
    start_timeout_seconds: float = 30.0
    #: the setting *url* came from (see :func:`redis_url_from`)
    url_source: str = "CRAWLFLEET_REDIS_URL"

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> RedisConfig:
        # the environment variable is installed as a setting by the add-on (priority 25:
        # above settings files, below -s on the command line)
        url, source = redis_url_from(settings)
        if url and not url.startswith(("redis://", "rediss://", "unix://", "valkey://")):
            raise ConfigError(
                f"{source} must start with redis://, rediss:// or unix://, got {redact_url(url)!r}"
            )
        prefix = str(settings.get("CRAWLFLEET_KEY_PREFIX"))
        if not prefix or any(c in prefix for c in "{}: "):
            raise ConfigError(
                f"CRAWLFLEET_KEY_PREFIX must be non-empty without braces, colons or spaces, "
                f"got {prefix!r}"
            )
        lo = get_float(settings, "CRAWLFLEET_REDIS_RETRY_MIN_SECONDS", minimum=0, strict=True)
        hi = get_float(settings, "CRAWLFLEET_REDIS_RETRY_MAX_SECONDS", minimum=lo)
        start = get_float(settings, "CRAWLFLEET_REDIS_START_TIMEOUT", minimum=0, strict=True)
        return cls(
            url=url,
            data_dir=Path(str(settings.get("CRAWLFLEET_DATA_DIR"))),
            key_prefix=prefix,
            retry_min_seconds=lo,
            retry_max_seconds=hi,
            start_timeout_seconds=start,
            url_source=source,
        )


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


#: Hash tags of the fleet's own keys (crawlfleet.redis.keys, crawlfleet.fleet.proxies):
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
