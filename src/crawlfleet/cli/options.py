"""Options shared by several commands, declared once, and the one place that builds a
command's settings: the Scrapy project's settings.py when the command runs inside a
project (as ``scrapy`` finds it: scrapy.cfg or SCRAPY_SETTINGS_MODULE), crawlfleet's
defaults below them, then the environment (``CRAWLFLEET_REDIS_URL``), then ``-s`` and
the command's own options."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from scrapy.settings import Settings
from scrapy.utils.project import get_project_settings, inside_project

from crawlfleet.exceptions import ConfigError
from crawlfleet.frontier.client import Frontier, SeenConfig
from crawlfleet.redis.connection import make_client, redact, resolve_url
from crawlfleet.redis.keys import JobKeys, jobs_key
from crawlfleet.settings import default_settings
from crawlfleet.settings.config import (
    FrontierConfig,
    RedisConfig,
    check_unknown,
    validate_job_name,
)

__all__ = [
    "UnknownJob",
    "add_redis_options",
    "add_settings_option",
    "command_settings",
    "parse_settings",
    "redis_in_use",
    "redis_problem",
    "resolved_url",
    "run_on_frontier",
]

logger = logging.getLogger(__name__)

#: The Redis URL a command resolved last (for its error messages; shown redacted).
_redis_url: str | None = None


class UnknownJob(ConfigError):
    """A command named a job that this Redis has never seen."""


def redis_in_use() -> str | None:
    """The Redis URL the command is using (password redacted), if it resolved one."""
    return redact(_redis_url) if _redis_url else None


T = TypeVar("T")


def add_redis_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--redis-url",
        metavar="URL",
        help="shared Redis (default: CRAWLFLEET_REDIS_URL, else embedded)",
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help="local data directory (default: CRAWLFLEET_DATA_DIR, .crawlfleet)",
    )


def add_settings_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-s",
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a Scrapy/crawlfleet setting",
    )


def parse_settings(args: argparse.Namespace) -> dict[str, Any]:
    """-s NAME=VALUE pairs plus --redis-url/--data-dir, as a settings dict."""
    values: dict[str, Any] = {}
    for item in getattr(args, "settings", []) or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"-s expects NAME=VALUE, got {item!r}")
        values[name] = value
    if getattr(args, "redis_url", None):
        values["CRAWLFLEET_REDIS_URL"] = args.redis_url
    if getattr(args, "data_dir", None):
        values["CRAWLFLEET_DATA_DIR"] = args.data_dir
    return values


def command_settings(args: argparse.Namespace) -> Settings:
    """The command's settings (see the module docstring); an unknown or misspelt
    ``CRAWLFLEET_*`` name raises ConfigError with a suggestion."""
    in_project = inside_project()
    settings = get_project_settings() if in_project else Settings()
    settings.setmodule(default_settings, priority="addon")  # the project's own win
    env_url = os.environ.get("CRAWLFLEET_REDIS_URL")
    if env_url:
        settings.set("CRAWLFLEET_REDIS_URL", env_url, priority=25)
    for name, value in parse_settings(args).items():
        settings.set(name, value, priority="cmdline")
    check_unknown(settings)
    if getattr(args, "verbose", False):
        where = os.environ.get("SCRAPY_SETTINGS_MODULE") if in_project else None
        logger.info("settings: %s", f"project {where}" if where else "no Scrapy project here")
    return settings


def resolved_url(args: argparse.Namespace, config: RedisConfig) -> str:
    """The Redis URL of *config* (starting the embedded Redis if none is configured),
    remembered for error messages and said with ``-v``."""
    global _redis_url
    _redis_url = resolve_url(config)
    if getattr(args, "verbose", False):
        logger.info("Redis: %s (key prefix %s)", redact(_redis_url), config.key_prefix)
    return _redis_url


def run_on_frontier(
    args: argparse.Namespace,
    job: str,
    action: Callable[[Frontier], Awaitable[T]],
    *,
    must_exist: bool = True,
) -> T:
    """Run *action* on the frontier of *job* with the command's Redis settings. With
    *must_exist*, a job this Redis has never seen raises UnknownJob (listing the
    known ones)."""
    settings = command_settings(args)
    redis_config = RedisConfig.from_settings(settings)
    config = FrontierConfig.from_settings(settings, validate_job_name(job))
    url = resolved_url(args, redis_config)
    if getattr(args, "verbose", False):
        logger.info("job: %s", config.job)

    async def main() -> T:
        client = make_client(url)
        try:
            if must_exist and not await client.sismember(jobs_key(redis_config.key_prefix), job):
                known = sorted(
                    j.decode() if isinstance(j, bytes) else str(j)
                    for j in await client.smembers(jobs_key(redis_config.key_prefix))
                )
                shown = ", ".join(known[:10]) + (", ..." if len(known) > 10 else "")
                raise UnknownJob(
                    f"no job {job!r} in this Redis (key prefix {redis_config.key_prefix!r}); "
                    + (f"known jobs: {shown}" if known else "it has no jobs yet")
                )
            frontier = Frontier(
                client,
                JobKeys.of(redis_config.key_prefix, config.job),
                SeenConfig(config.seen_mode, config.bloom_capacity, config.bloom_error_rate),
            )
            return await action(frontier)
        finally:
            await client.aclose()

    return asyncio.run(main())


def redis_problem(exc: BaseException) -> str:
    """One line saying what went wrong with Redis, its URL's password redacted."""
    url = redis_in_use() or "(not resolved)"
    text = redact(" ".join(str(exc).split())) or type(exc).__name__
    lowered = text.lower()
    if isinstance(exc, AuthenticationError) or any(
        word in lowered for word in ("noauth", "wrongpass", "invalid password", "auth")
    ):
        return f"Redis at {url} refused the credentials: {text}"
    if isinstance(exc, RedisConnectionError | RedisTimeoutError):
        return f"Redis at {url} unreachable: {text}"
    return f"Redis at {url}: {text}"
