"""Run-time rate limits: what ``crawlfleet limits`` and the manager's limits endpoints
change. The fleet's limits (``/api/v1/limits``) override ``CRAWLFLEET_RATE_LIMITS`` on
every node of every job, and a site they cover has one budget for all jobs; a job's own
limits (``/api/v1/jobs/{job}/limits``) give that job a budget of its own for the sites
they cover. Nodes read both again with their next heartbeat.

*job* None means the fleet's limits throughout."""

from __future__ import annotations

from redis.asyncio import Redis

from crawlfleet.frontier.limits import RateLimits, parse_limit
from crawlfleet.redis.keys import FleetKeys, JobKeys, jobs_key
from crawlfleet.redis.replies import text

__all__ = ["read_limits", "set_limits", "unset_limits"]


def _pattern(pattern: str) -> str:
    return pattern.strip().lower()


def _key(prefix: str, job: str | None) -> str:
    return FleetKeys(prefix).limits if job is None else JobKeys.of(prefix, job).limits


async def read_limits(client: Redis, prefix: str, job: str | None) -> dict[str, str]:
    """The run-time limits of *job* (its own) or of the fleet: pattern -> "H/Ws"."""
    raw = await client.hgetall(_key(prefix, job))
    return {text(k): text(v) for k, v in raw.items()}


async def set_limits(
    client: Redis, prefix: str, job: str | None, limits: dict[str, str]
) -> dict[str, str]:
    """Set each pattern's limit ("H/W"; "none" lifts a configured one), all or none
    (ConfigError naming the first bad one, nothing written); returns the limits after.
    A job not known yet is registered (its limits wait for its nodes)."""
    RateLimits.parse(limits, source="limit")
    if limits:
        if job is not None:
            await client.sadd(jobs_key(prefix), job)
        mapping: dict[str | bytes, str | bytes] = {
            _pattern(p): spec.strip() if parse_limit(spec) else "none" for p, spec in limits.items()
        }
        await client.hset(_key(prefix, job), mapping=mapping)  # type: ignore[arg-type]
    return await read_limits(client, prefix, job)


async def unset_limits(
    client: Redis, prefix: str, job: str | None, patterns: list[str] | None = None
) -> dict[str, str]:
    """Remove these patterns' run-time limits (every one when None); returns those left."""
    key = _key(prefix, job)
    if patterns is None:
        await client.delete(key)
    elif patterns:
        await client.hdel(key, *(_pattern(p) for p in patterns))
    return await read_limits(client, prefix, job)
