"""``crawlfleet status`` and ``crawlfleet health`` against a real Redis."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from crawlfleet.cli import health, status
from crawlfleet.frontier.client import Frontier
from crawlfleet.frontier.limits import SPACING
from crawlfleet.frontier.records import Outgoing
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from tests.support.cli import parse_command, redis_options

FIGURES = {"pages_per_min": 120.0, "cpu_percent": 12.5, "rss_bytes": 50 * 2**20}


async def _setup(
    url: str,
    prefix: str,
    job: str,
    *,
    requests: dict[str, int],
    node: bool = True,
    lease: int = 0,
    stuck: bool = False,
) -> None:
    """A job with *requests* (site -> count) queued, optionally a live node publishing
    FIGURES, *lease* requests leased to it (their deadline an hour ago with *stuck*)."""
    client = make_client(url)
    try:
        frontier = Frontier(client, JobKeys.of(prefix, job))
        await frontier.register_job()
        outgoing = [
            Outgoing(f"{site}-{i}".encode().ljust(16, b"\0"), site, 0, b"payload")
            for site, n in requests.items()
            for i in range(n)
        ]
        await frontier.commit("seeder", outgoing)
        if node:
            await frontier.heartbeat(
                "node-a", ttl_ms=60_000, status=json.dumps(FIGURES), busy=True, lease_ms=30_000
            )
        if lease:
            sites = await frontier.offer(10)
            got = await frontier.lease(
                "node-a", lease, sites, lease_ms=30_000, per_site=lease, offer_size=10
            )
            if stuck:
                old = got.now_us // 1000 - 3_600_000
                await client.zadd(frontier.keys.leases, {e.rid: old for e in got.entries}, xx=True)
    finally:
        await client.aclose()


def test_status_json(
    redis_server_url: str, key_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(
        _setup(redis_server_url, key_prefix, "shop", requests={"a.example": 5, "b.example": 2})
    )
    args = parse_command(status, "shop", "--json", *redis_options(redis_server_url, key_prefix))
    assert status.run(args) == 0
    doc = json.loads(capsys.readouterr().out)
    job = doc["jobs"]["shop"]
    assert job["queued"] == 7 and job["leased"] == 0 and job["sites"] == 2
    assert job["top_sites"] == [
        {"site": "a.example", "queued": 5},
        {"site": "b.example", "queued": 2},
    ]
    assert job["malformed_set_aside"] == 0
    assert job["live_nodes"] == 1 and job["dead_nodes"] == 0
    node = job["nodes"]["node-a"]
    assert node["alive"] is True and node["expires_in_s"] > 50
    assert node["pages_per_min"] == 120.0 and node["cpu_percent"] == 12.5
    assert job["pages_per_second"] == 2.0 and job["eta_seconds"] == 3.5
    # every job when none is named; the table and a bounded --watch also work
    args = parse_command(status, "--json", *redis_options(redis_server_url, key_prefix))
    assert status.run(args) == 0
    assert list(json.loads(capsys.readouterr().out)["jobs"]) == ["shop"]
    assert status.run(parse_command(status, *redis_options(redis_server_url, key_prefix))) == 0
    assert "node-a" in capsys.readouterr().out
    args = parse_command(
        status,
        "--watch",
        "--count",
        "2",
        "--interval",
        "0.5",
        *redis_options(redis_server_url, key_prefix),
    )
    assert status.run(args) == 0
    assert "a.example" in capsys.readouterr().out


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_health_without_redis(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse_command(health, "--redis-url", f"redis://127.0.0.1:{_closed_port()}/0")
    assert health.run(args) == 1
    out = capsys.readouterr().out
    assert "unhealthy: Redis at redis://127.0.0.1:" in out and "unreachable" in out


def test_health_config_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert health.run(parse_command(health, "--redis-url", "http://nope")) == 2
    assert "CRAWLFLEET_REDIS_URL" in capsys.readouterr().err


def test_health_work_without_live_node(
    redis_server_url: str, key_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(_setup(redis_server_url, key_prefix, "orphan", requests={"a": 3}, node=False))
    assert health.run(parse_command(health, *redis_options(redis_server_url, key_prefix))) == 1
    assert "job orphan: 3 queued and 0 leased but no live node" in capsys.readouterr().out


def test_health_stuck_lease(
    redis_server_url: str, key_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(
        _setup(redis_server_url, key_prefix, "stuck", requests={"a": 3}, lease=1, stuck=True)
    )
    args = parse_command(health, "stuck", *redis_options(redis_server_url, key_prefix))
    assert health.run(args) == 1
    out = capsys.readouterr().out
    assert "job stuck: stuck, a lease expired 3600s ago" in out, out
    assert "no live node" not in out


def test_health_healthy(
    redis_server_url: str, key_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(_setup(redis_server_url, key_prefix, "fine", requests={"a": 3}, lease=2))
    assert health.run(parse_command(health, *redis_options(redis_server_url, key_prefix))) == 0
    assert "healthy: Redis answers, 1 job(s) checked" in capsys.readouterr().out
    # a job nobody knows is a problem when named
    assert (
        health.run(parse_command(health, "nosuch", *redis_options(redis_server_url, key_prefix)))
        == 1
    )
    assert "job nosuch: not known" in capsys.readouterr().out


def test_status_shows_job_commands_back_offs_and_robots_delays(
    redis_server_url: str, key_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def steer() -> None:
        client = make_client(redis_server_url)
        try:
            frontier = Frontier(client, JobKeys.of(key_prefix, "steered"))
            await frontier.send_control("*", "state", "paused")
            await frontier.send_control("*", "concurrency", 3)
            await frontier.send_control("node-a", "state", "draining")  # one node: not shown
            await frontier.backoff({"slow.example": 4000})
            await frontier.set_robots({"polite.example": 2000, "plain.example": 0})
        finally:
            await client.aclose()

    # back-offs and robots.txt delays are the fleet's: a job shows those of its sites
    queued = {"a.example": 1, "slow.example": 1, "polite.example": 1, "plain.example": 1}
    asyncio.run(_setup(redis_server_url, key_prefix, "steered", requests=queued))
    asyncio.run(steer())
    options = redis_options(redis_server_url, key_prefix)
    assert status.run(parse_command(status, "steered", "--json", *options)) == 0
    job = json.loads(capsys.readouterr().out)["jobs"]["steered"]
    assert job["job_control"] == {"state": "paused", "concurrency": "3"}
    assert job["backoff_ms"] == {"slow.example": 4000}
    assert job["robots_delay_ms"] == {"polite.example": 2000}
    assert status.run(parse_command(status, "steered", *options)) == 0
    table = capsys.readouterr().out
    assert "concurrency 3, state paused" in table
    assert "1: slow.example 4.0s" in table and "1: polite.example 2.0s" in table


def test_the_eta_knows_rate_limits_and_pauses(
    redis_server_url: str, key_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # 2 pages/s measured, 7 queued: 3.5 s by the rate; but a.example's 5 pages at its
    # limit of 1 every 2 s (configured) take 5 x 2.05 s
    asyncio.run(
        _setup(redis_server_url, key_prefix, "shop", requests={"a.example": 5, "b.example": 2})
    )
    limited = [
        *redis_options(redis_server_url, key_prefix),
        "-s",
        'CRAWLFLEET_RATE_LIMITS={"a.example": "1/2s"}',
    ]
    assert status.run(parse_command(status, "shop", "--json", *limited)) == 0
    job = json.loads(capsys.readouterr().out)["jobs"]["shop"]
    assert job["eta_seconds"] == pytest.approx(5 * 2 * SPACING)
    assert job["eta_limited_by"] == "rate limit of a.example"
    # a run-time limit (crawlfleet limits set) counts too, over the configured one
    asyncio.run(_set_limit(redis_server_url, key_prefix, "shop", "b.example", "1/10s"))
    assert status.run(parse_command(status, "shop", "--json", *limited)) == 0
    job = json.loads(capsys.readouterr().out)["jobs"]["shop"]
    assert job["eta_seconds"] == pytest.approx(2 * 10 * SPACING)
    assert job["eta_limited_by"] == "rate limit of b.example"
    assert status.run(parse_command(status, "shop", *limited)) == 0
    assert "(rate limit of b.example)" in capsys.readouterr().out
    # paused: no ETA
    asyncio.run(_pause(redis_server_url, key_prefix, "shop"))
    assert status.run(parse_command(status, "shop", "--json", *limited)) == 0
    job = json.loads(capsys.readouterr().out)["jobs"]["shop"]
    assert job["eta_seconds"] is None and job["eta_limited_by"] == "paused"


async def _set_limit(url: str, prefix: str, job: str, site: str, limit: str) -> None:
    client = make_client(url)
    try:
        await client.hset(JobKeys.of(prefix, job).limits, site, limit)
    finally:
        await client.aclose()


async def _pause(url: str, prefix: str, job: str) -> None:
    client = make_client(url)
    try:
        await Frontier(client, JobKeys.of(prefix, job)).send_control("*", "state", "paused")
    finally:
        await client.aclose()


def test_status_fits_an_80_column_terminal(
    redis_server_url: str,
    key_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asyncio.run(_setup(redis_server_url, key_prefix, "shop", requests={"a.example": 5}))
    for columns, fits in (("80", True), ("200", False)):
        monkeypatch.setenv("COLUMNS", columns)
        assert (
            status.run(parse_command(status, "shop", *redis_options(redis_server_url, key_prefix)))
            == 0
        )
        lines = capsys.readouterr().out.splitlines()
        assert ("node-a" in "".join(lines)) and (max(map(len, lines)) <= 80) == fits, lines
