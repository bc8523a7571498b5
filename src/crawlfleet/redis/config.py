"""The typed view of where the shared Redis is: CRAWLFLEET_REDIS_URL, or the project's
scrapy-redis settings, or the embedded Redis (see :class:`RedisConfig`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from scrapy.settings import BaseSettings

from crawlfleet.exceptions import ConfigError
from crawlfleet.settings.access import get_float
from crawlfleet.settings.config import redact_url

__all__ = ["RedisConfig", "redis_url_from"]


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
