"""``crawlfleet health [JOB]``: exit 0 when healthy, 1 otherwise (one line per problem),
2 on a usage or configuration error. Read-only; meant for monitoring probes.

Healthy means: Redis answers; every job (the one named, or every job in
``<prefix>:jobs``) that has queued or leased work has at least one live node; and no
lease's deadline passed more than 2 x ``CRAWLFLEET_LEASE_SECONDS`` ago (live nodes return
expired leases within ``CRAWLFLEET_RECLAIM_SECONDS``, so such a lease means the job is
stuck).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from crawlfleet.cli.options import (
    add_fleet_options,
    cli_client,
    command_settings,
    redis_problem,
    resolved_url,
)
from crawlfleet.exceptions import ConfigError, UnknownJob
from crawlfleet.fleet.snapshot import JobSnapshot, job_names, snapshot
from crawlfleet.frontier.config import validate_job_name
from crawlfleet.redis.config import RedisConfig
from crawlfleet.redis.connection import REDIS_ERRORS
from crawlfleet.redis.keys import JobKeys
from crawlfleet.settings.access import get_float

__all__ = ["problems"]

NAME = "health"
HELP = "exit 0 if Redis answers and no job is left without nodes or stuck, else 1"

#: A lease this many lease lengths past its deadline means nobody reclaims it.
STUCK_LEASE_FACTOR = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", nargs="?", help="the job (default: every job in this Redis)")
    add_fleet_options(parser)


def problems(snap: JobSnapshot, lease_seconds: float) -> list[str]:
    """What is wrong with one job, one sentence each; [] when healthy."""
    found = []
    if (snap.queued > 0 or snap.leased > 0) and not snap.live_nodes:
        dead = len(snap.nodes)
        found.append(
            f"job {snap.job}: {snap.queued} queued and {snap.leased} leased but no live node"
            + (f" ({dead} dead)" if dead else "")
        )
    limit_ms = STUCK_LEASE_FACTOR * lease_seconds * 1000
    if snap.oldest_deadline_ms is not None and snap.now_ms - snap.oldest_deadline_ms > limit_ms:
        late = (snap.now_ms - snap.oldest_deadline_ms) / 1000
        found.append(
            f"job {snap.job}: stuck, a lease expired {late:.0f}s ago (more than "
            f"{STUCK_LEASE_FACTOR} x CRAWLFLEET_LEASE_SECONDS = "
            f"{STUCK_LEASE_FACTOR * lease_seconds:g}s) and was not returned to its queue"
        )
    return found


def run(args: argparse.Namespace) -> int:
    try:
        settings = command_settings(args)
        config = RedisConfig.from_settings(settings)
        lease_seconds = get_float(settings, "CRAWLFLEET_LEASE_SECONDS", minimum=1)
        if args.job:
            validate_job_name(args.job)
        url = resolved_url(args, config)
    except ConfigError as exc:
        print(f"crawlfleet health: error: {exc}", file=sys.stderr)
        return 2

    async def main() -> tuple[list[str], int]:
        client = cli_client(url)
        try:
            found = []
            try:
                names = await job_names(client, config.key_prefix, args.job)
            except UnknownJob:
                names = []
                found.append(f"job {args.job}: not known to this Redis")
            for name in names:
                snap = await snapshot(client, JobKeys.of(config.key_prefix, name))
                found += problems(snap, lease_seconds)
            return found, len(names)
        finally:
            await client.aclose()

    try:
        found, checked = asyncio.run(main())
    except REDIS_ERRORS as exc:
        print(f"unhealthy: {redis_problem(exc)}")
        return 1
    for line in found:
        print(f"unhealthy: {line}")
    if found:
        return 1
    print(f"healthy: Redis answers, {checked} job(s) checked")
    return 0
