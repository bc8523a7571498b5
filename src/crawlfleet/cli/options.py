"""Options shared by several commands, declared once, and the one place that builds a
command's settings: the Scrapy project's settings.py when the command runs inside a
project (as ``scrapy`` finds it: scrapy.cfg or SCRAPY_SETTINGS_MODULE), crawlfleet's
defaults below them, then the environment (``CRAWLFLEET_REDIS_URL``), then ``-s`` and
the command's own options: the precedence of ``scrapy crawl`` with the add-on."""

from __future__ import annotations

import argparse
import asyncio
import difflib
import logging
import os
import tomllib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from redis.asyncio import Redis
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from scrapy.settings import BaseSettings, Settings
from scrapy.utils.conf import closest_scrapy_cfg, init_env
from scrapy.utils.project import get_project_settings

from crawlfleet.cli.arguments import add_pairs_option, pairs
from crawlfleet.exceptions import CommandFailed, ConfigError
from crawlfleet.fleet.jobs import require_job
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.redis.connection import (
    CLUSTER_REPLIES,
    CLUSTER_UNSUPPORTED,
    make_client,
    redact,
    refuse_cluster,
    resolve_url,
)
from crawlfleet.redis.keys import JobKeys

if TYPE_CHECKING:
    from crawlfleet.state.db import StateDB
from crawlfleet.frontier.config import FrontierConfig, validate_job_name
from crawlfleet.redis.config import RedisConfig
from crawlfleet.settings.config import apply_defaults, check_unknown

__all__ = [
    "CLI_TIMEOUT_SECONDS",
    "add_fleet_options",
    "add_redis_options",
    "add_settings_option",
    "check_reachable",
    "cli_client",
    "command_settings",
    "parse_settings",
    "project_module",
    "project_settings",
    "read_config_file",
    "redis_in_use",
    "redis_problem",
    "resolved_url",
    "run_on_frontier",
    "run_on_redis",
]

logger = logging.getLogger(__name__)

#: The Redis URL a command resolved last (for its error messages; shown redacted).
_redis_url: str | None = None


def redis_in_use() -> str | None:
    """The Redis URL the command is using (password redacted), if it resolved one."""
    return redact(_redis_url) if _redis_url else None


T = TypeVar("T")


def add_fleet_options(parser: argparse.ArgumentParser) -> None:
    """The options of every command that works on the fleet: its Redis
    (:func:`add_redis_options`) and its settings (:func:`add_settings_option`)."""
    add_redis_options(parser)
    add_settings_option(parser)


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
    add_pairs_option(parser, "-s", "--set", dest="settings", help="set a Scrapy/crawlfleet setting")
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="a TOML file of settings (NAME = value, one a line; -s wins over it)",
    )


def read_config_file(path: Path) -> dict[str, Any]:
    """The settings of a TOML file: top-level names and their values (a table is a
    dict: ``CRAWLFLEET_RATE_LIMITS = {"*" = "2/1s"}``); ConfigError saying what is
    wrong and where."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"config file {path}: {reason}") from None
    try:
        values = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: not valid TOML: {exc}") from None
    for name in values:
        if not name.replace("_", "").isalnum() or name != name.upper():
            raise ConfigError(f"config file {path}: {name!r} is not a setting name (NAME_IN_CAPS)")
    return values


def parse_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--config`` file's settings, then -s NAME=VALUE pairs and --redis-url,
    --data-dir and --db over them, as a settings dict."""
    config: Path | None = getattr(args, "config", None)
    values: dict[str, Any] = read_config_file(config) if config is not None else {}
    values.update(pairs(getattr(args, "settings", []) or [], "-s"))
    if getattr(args, "redis_url", None):
        values["CRAWLFLEET_REDIS_URL"] = args.redis_url
    if getattr(args, "data_dir", None):
        values["CRAWLFLEET_DATA_DIR"] = args.data_dir
    if getattr(args, "db", None):
        values["CRAWLFLEET_STATE_DB_URL"] = args.db
    return values


def command_settings(args: argparse.Namespace, *, any_name: bool = False) -> Settings:
    """The command's settings (see the module docstring). An unknown or misspelt
    ``CRAWLFLEET_*`` name, or a ``-s`` name that neither Scrapy, crawlfleet nor the
    project defines (unless *any_name*: a node's spider may read its own), raises
    ConfigError with a suggestion."""
    settings = project_settings()
    apply_defaults(settings)  # crawlfleet's defaults, the environment's Redis URL
    given = parse_settings(args)
    if not any_name:
        for name in given:
            if name not in settings:
                raise ConfigError(f"unknown setting {name}{_suggestion(name, settings)}")
    for name, value in given.items():
        settings.set(name, value, priority="cmdline")
    check_unknown(settings)
    where = project_module()
    logger.debug("settings: %s", f"project {where}" if where else "no Scrapy project here")
    return settings


def project_module() -> str | None:
    """The settings module of the Scrapy project the command runs in, if any (found as
    ``scrapy`` finds it: SCRAPY_SETTINGS_MODULE, else the nearest scrapy.cfg)."""
    if not (os.environ.get("SCRAPY_SETTINGS_MODULE") or closest_scrapy_cfg()):
        return None
    init_env(os.environ.get("SCRAPY_PROJECT", "default"))
    return os.environ.get("SCRAPY_SETTINGS_MODULE")


def project_settings() -> Settings:
    """Scrapy's settings with the project's settings.py over them when the command runs
    in a project; a settings module that cannot be loaded is a ConfigError naming it."""
    module = project_module()
    if module is None:
        return Settings()
    try:
        return get_project_settings()
    except Exception as exc:  # a broken settings.py: say which and why, in one line
        cause = " ".join(str(exc).split()) or type(exc).__name__
        raise ConfigError(
            f"cannot load the Scrapy project's settings {module}: {type(exc).__name__}: {cause}"
        ) from None


def _suggestion(name: str, settings: BaseSettings) -> str:
    """ " (did you mean X?)" for a name close to a known one, else ""."""
    upper = name.upper()
    for candidate in (upper, f"CRAWLFLEET_{upper}"):  # REDIS_URL: scrapy-redis's name
        if candidate != name and candidate in settings:
            return f" (did you mean {candidate}?)"
    known = sorted(n for n in settings if isinstance(n, str))
    close = difflib.get_close_matches(upper, known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def resolved_url(args: argparse.Namespace, config: RedisConfig, *, quiet: bool = False) -> str:
    """The Redis URL of *config* (starting the embedded Redis if none is configured),
    remembered for error messages and said with ``-v``; the embedded Redis is said in
    any case unless *quiet* (a command that reaches it by mistake would see none of the
    fleet's jobs)."""
    global _redis_url
    _redis_url = resolve_url(config)
    if config.url or quiet:
        logger.debug(
            "Redis: %s from %s (key prefix %s)",
            redact(_redis_url),
            config.url_source if config.url else "no setting: the embedded Redis",
            config.key_prefix,
        )
    else:
        logger.info(
            "no CRAWLFLEET_REDIS_URL: using the embedded Redis %s (data in %s, key prefix %s)",
            _redis_url,
            config.data_dir / "redis",
            config.key_prefix,
        )
    return _redis_url


#: Seconds a command waits for Redis to accept a connection, and then for each reply:
#: a hung Redis (a stopped process) is an error after this long, not a silent command.
CLI_TIMEOUT_SECONDS = 5.0


def cli_client(url: str, **options: Any) -> Redis:
    """A client for a command: the process's usual client with the command timeouts."""
    kwargs: dict[str, Any] = {
        "socket_connect_timeout": CLI_TIMEOUT_SECONDS,
        "socket_timeout": CLI_TIMEOUT_SECONDS,
    }
    kwargs.update(options)
    return make_client(url, **kwargs)


def check_reachable(url: str) -> None:
    """Ping Redis once; RedisError (one line from crawlfleet.cli.main) if it does not
    answer. For commands that would otherwise wait for it (nodes, workers, the demo)."""

    async def ping() -> None:
        client = cli_client(url)
        try:
            await client.ping()
            await refuse_cluster(client)
        finally:
            await client.aclose()

    asyncio.run(ping())


def run_on_frontier(
    args: argparse.Namespace,
    job: str,
    action: Callable[[JobFrontier], Awaitable[T]],
    *,
    must_exist: bool = True,
    settings: Settings | None = None,
) -> T:
    """Run *action* on the frontier of *job* with the command's Redis *settings* (by
    default ``command_settings(args)``). With *must_exist*, a job this Redis has never
    seen raises UnknownJob (listing the known ones)."""
    settings = command_settings(args) if settings is None else settings
    config = FrontierConfig.from_settings(settings, validate_job_name(job))
    logger.debug("job: %s", config.job)

    async def on_job(client: Redis, prefix: str) -> T:
        if must_exist:
            await require_job(client, prefix, job)
        frontier = JobFrontier(
            client,
            JobKeys.of(prefix, config.job),
            config.seen,
            shards=config.shards,
        )
        return await action(frontier)

    return run_on_redis(args, on_job, settings=settings)


def run_on_redis(
    args: argparse.Namespace,
    action: Callable[[Redis, str], Awaitable[T]],
    *,
    settings: Settings | None = None,
) -> T:
    """Run *action(client, key prefix)* on the command's Redis (*settings*, by default
    ``command_settings(args)``)."""
    settings = command_settings(args) if settings is None else settings
    redis_config = RedisConfig.from_settings(settings)
    url = resolved_url(args, redis_config)

    async def main() -> T:
        client = cli_client(url)
        try:
            await refuse_cluster(client)
            return await action(client, redis_config.key_prefix)
        finally:
            await client.aclose()

    return asyncio.run(main())


def open_state_db(url: str) -> StateDB:
    """The state DB at *url*, migrated; CommandFailed (one line) if it does not answer.
    (SQLAlchemy is imported here, not with this module: a node loads it only when it
    first writes to the error registry.)"""
    from sqlalchemy.exc import SQLAlchemyError

    from crawlfleet.state.db import StateDB

    db = StateDB.open(url)
    try:
        db.upgrade()
    except SQLAlchemyError as exc:
        reason = " ".join(str(getattr(exc, "orig", None) or exc).split())[:300]
        db.close()
        raise CommandFailed(f"state DB {db.shown} unusable: {reason}") from None
    return db


def redis_problem(exc: BaseException) -> str:
    """One line saying what went wrong with Redis, its URL's password redacted."""
    url = redis_in_use() or "(not resolved)"
    text = redact(" ".join(str(exc).split())).rstrip(".") or type(exc).__name__
    lowered = text.lower()
    if isinstance(exc, AuthenticationError) or any(
        word in lowered for word in ("noauth", "wrongpass", "invalid password", "auth")
    ):
        return f"Redis at {url} refused the credentials: {text}"
    if isinstance(exc, RedisConnectionError | RedisTimeoutError):
        return f"Redis at {url} unreachable: {text}"
    if text.startswith(CLUSTER_REPLIES):
        return f"Redis at {url} is {CLUSTER_UNSUPPORTED} ({text})"
    return f"Redis at {url}: {text}"
