"""A node joining its job at start, and the lines it starts with.

:func:`join`, in order:

1. with SCHEDULER_FLUSH_ON_START (scrapy-redis's "start from nothing"), the job is
   reset first, unless other nodes work on it: ConfigError then, naming the way to
   start over (their work would be lost). The node registers in the same step as the
   check, so that of nodes started together one resets and the others are refused, and
   the reset keeps it registered;
2. the job is registered (listed among the fleet's jobs, its shard count fixed).

Redis is tried for CRAWLFLEET_REDIS_START_TIMEOUT in all, with back-off
(:func:`~crawlfleet.outage.until_reachable`); then :class:`RedisUnreachable`, saying
where Redis was looked for and why it failed (no password).
"""

from __future__ import annotations

import logging
import time

from crawlfleet.exceptions import ConfigError, RedisUnreachable
from crawlfleet.frontier.base import FrontierBackend
from crawlfleet.frontier.config import FrontierConfig
from crawlfleet.outage import Backoff, GaveUp, until_reachable
from crawlfleet.redis.config import RedisConfig
from crawlfleet.redis.connection import redact

__all__ = ["join", "say_joined"]

logger = logging.getLogger(__name__)


async def join(
    frontier: FrontierBackend,
    node_id: str,
    config: FrontierConfig,
    redis_config: RedisConfig,
    backoff: Backoff,
    *,
    flush_first: bool = False,
) -> None:
    """Join node *node_id* to the job of *frontier* (see the module docstring); reset
    the job first when *flush_first*."""
    limit = redis_config.start_timeout_seconds
    started = time.monotonic()
    try:
        if flush_first:
            await until_reachable(
                "reset the job before joining it",
                lambda: _reset_alone(frontier, node_id, config),
                backoff,
                give_up_after=limit,
            )
        left = max(0.0, limit - (time.monotonic() - started))
        await until_reachable(
            "open the frontier", frontier.register_job, backoff, give_up_after=left
        )
    except GaveUp as exc:
        where = redact(redis_config.url) or "the embedded Redis"
        raise RedisUnreachable(
            f"Redis at {where} unreachable for {time.monotonic() - started:.1f}s at start, "
            f"giving up (CRAWLFLEET_REDIS_START_TIMEOUT = {limit:g}): {exc}"
        ) from None


async def _reset_alone(frontier: FrontierBackend, node_id: str, config: FrontierConfig) -> None:
    """SCHEDULER_FLUSH_ON_START, as scrapy-redis means it: reset the job unless other
    nodes work on it (ConfigError then). Safe to run again after a failure: the check
    registers this node, and an interrupted reset can be run again."""
    job = config.job
    # registered first, in one step with the check: a node starting meanwhile sees this
    # one, and the reset keeps it registered
    live = await frontier.join_alone(node_id, int(config.node_timeout_seconds * 1000))
    if live:
        raise ConfigError(
            f"SCHEDULER_FLUSH_ON_START = True would delete job {job!r} while "
            f"{len(live)} other node(s) work on it: remove the setting (the job's "
            f"state persists), and to start over stop its nodes and run "
            f"`crawlfleet job reset {job}`"
        )
    deleted = await frontier.reset(keep_limits=True, keep_nodes=True)
    logger.warning(
        "SCHEDULER_FLUSH_ON_START: job %r reset before this node joined it "
        "(%d keys deleted; no other node was alive)",
        job,
        deleted,
    )


def say_joined(node_id: str, config: FrontierConfig, redis_config: RedisConfig) -> None:
    """The lines a node starts with: who it is and how it crawls (INFO), where its
    Redis comes from (DEBUG), and its politeness (INFO)."""
    logger.info(
        "crawlfleet node %s on job %r (seen-filter: %s, site key: %s, prefetch: %d)",
        node_id,
        config.job,
        config.seen_mode,
        config.site_key,
        config.prefetch,
    )
    rc = redis_config
    logger.debug(
        "Redis: %s from %s",
        redact(rc.url) if rc.url else "the embedded Redis",
        rc.url_source if rc.url else f"no setting (data in {rc.data_dir})",
    )
    logger.info(
        "%s",
        config.politeness.describe(
            config.configured_limits,
            backoff_start=config.backoff.start_seconds,
            backoff_max=config.backoff.max_seconds,
        ),
    )
