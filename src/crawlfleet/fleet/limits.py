"""A job's run-time rate limits: what ``crawlfleet limits`` and the manager's
``/api/v1/jobs/{job}/limits`` change. They override ``CRAWLFLEET_RATE_LIMITS``; every
node of the job reads them again with its next heartbeat."""

from __future__ import annotations

from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.limits import RateLimits, parse_limit

__all__ = ["set_limits", "unset_limits"]


def _pattern(pattern: str) -> str:
    return pattern.strip().lower()


async def set_limits(frontier: Frontier, limits: dict[str, str]) -> dict[str, str]:
    """Set each pattern's limit ("H/W"; "none" lifts a configured one), all or none
    (ConfigError naming the first bad one, nothing written); returns the job's run-time
    limits after. A job not known yet is registered (its limits wait for its nodes)."""
    RateLimits.parse(limits, source="limit")
    if limits:
        await frontier.register_job()
        mapping: dict[str | bytes, str | bytes] = {
            _pattern(p): spec.strip() if parse_limit(spec) else "none" for p, spec in limits.items()
        }
        await frontier.client.hset(frontier.keys.limits, mapping=mapping)  # type: ignore[arg-type]
    return await frontier.read_limits()


async def unset_limits(frontier: Frontier, patterns: list[str] | None = None) -> dict[str, str]:
    """Remove these patterns' run-time limits (every one when None); returns those left."""
    if patterns is None:
        await frontier.client.delete(frontier.keys.limits)
    elif patterns:
        await frontier.client.hdel(frontier.keys.limits, *(_pattern(p) for p in patterns))
    return await frontier.read_limits()
