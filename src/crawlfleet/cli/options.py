"""Options shared by several commands, declared once."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from scrapy.settings import Settings

from crawlfleet.exceptions import ConfigError
from crawlfleet.frontier.client import Frontier, SeenConfig
from crawlfleet.redis.connection import make_client, resolve_url
from crawlfleet.redis.keys import JobKeys
from crawlfleet.settings.config import (
    FrontierConfig,
    RedisConfig,
    settings_with_defaults,
    validate_job_name,
)

__all__ = ["add_redis_options", "add_settings_option", "parse_settings", "run_on_frontier"]

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
    return settings_with_defaults(parse_settings(args))


def run_on_frontier(
    args: argparse.Namespace, job: str, action: Callable[[Frontier], Awaitable[T]]
) -> T:
    """Run *action* on the frontier of *job* with the command's Redis settings."""
    settings = command_settings(args)
    redis_config = RedisConfig.from_settings(settings)
    config = FrontierConfig.from_settings(settings, validate_job_name(job))
    url = resolve_url(redis_config)

    async def main() -> T:
        client = make_client(url)
        try:
            frontier = Frontier(
                client,
                JobKeys.of(redis_config.key_prefix, config.job),
                SeenConfig(config.seen_mode, config.bloom_capacity, config.bloom_error_rate),
            )
            return await action(frontier)
        finally:
            await client.aclose()

    return asyncio.run(main())
