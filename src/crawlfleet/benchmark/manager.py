"""The manager part of ``crawlfleet bench``: many operators at once.

A real ``crawlfleet manager serve`` (its own process, a SQLite state DB of its own) on
the fleet's Redis, where ``jobs`` jobs each have ``nodes_per_job`` nodes heartbeating
every second with a status the size of a real node's. Then, for ``seconds``:
``clients`` clients, each on one keep-alive connection, ask one after the other for the
fleet (``GET /api/v1/jobs``), a job (``GET /api/v1/jobs/NAME``) and the nodes
(``GET /api/v1/nodes``) with a viewer's token; ``streams`` live streams
(``GET /api/v1/live?job=NAME``) are read at the same time.

Measured: requests answered per second, their latency (p50, p99), answers that were not
200 (5xx apart), the manager process's CPU per request (user + system, from the
kernel), and each stream's cadence: the gaps between its ``fleet`` events (median and
the longest of any stream; the manager sends a round a second).

The load comes from one process with a minimal HTTP/1.1 client (asyncio streams), so
that the machine's CPU goes to the manager rather than to the clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from crawlfleet.frontier.client import Frontier
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.embedded import free_port
from crawlfleet.redis.keys import JobKeys
from crawlfleet.state.db import StateDB
from crawlfleet.state.tokens import create_token

__all__ = ["ManagerResult", "run_manager_bench"]


@dataclass
class ManagerResult:
    clients: int
    streams: int
    jobs: int
    nodes: int
    seconds: float
    requests: int
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    errors_5xx: int
    errors_other: int
    #: manager process CPU (user + system) per request answered, streams included
    cpu_ms_per_request: float
    #: manager process CPU over the run, in cores (1.0 = one core busy)
    cpu_cores: float
    #: gaps between a stream's fleet events: median, and the longest of any stream (s)
    stream_gap_median_s: float
    stream_gap_max_s: float
    #: fleet events each stream received (fewest, most)
    stream_events: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _status(job: str, node: int) -> str:
    """A node's status as a live node publishes it (about the size of a real one)."""
    sites = {
        f"site{i}.example": {"leased": 2, "done_per_min": 30.0 + i, "latency_ms": 120}
        for i in range(10)
    }
    latest = [
        {"url": f"https://site1.example/page/{node}/{i}", "title": "A page " * 6, "price": "9.99"}
        for i in range(3)
    ]
    return json.dumps(
        {
            "state": "running",
            "host": f"host-{node % 3}",
            "ip": f"10.0.0.{node % 250}",
            "pages": 1000 * node,
            "items": 800 * node,
            "pages_per_min": 600.0,
            "items_per_min": 480.0,
            "errors": {"http": 3, "timeout": 1},
            "latency_ms": 140.0,
            "in_flight": 12,
            "concurrency": 16,
            "cpu_percent": 35.0,
            "loop_lag_max_ms": 4.0,
            "rss_bytes": 150_000_000,
            "sites": sites,
            "latest_items": latest,
            "job": job,
        }
    )


async def _beat(redis_url: str, prefix: str, jobs: int, nodes: int, stop: asyncio.Event) -> None:
    client = make_client(redis_url)
    try:
        frontiers = [Frontier(client, JobKeys.of(prefix, f"bench-job-{j}")) for j in range(jobs)]
        for f in frontiers:
            await f.register_job()
        statuses = {(j, n): _status(f"bench-job-{j}", n) for j in range(jobs) for n in range(nodes)}
        while not stop.is_set():
            for j, f in enumerate(frontiers):
                for n in range(nodes):
                    await f.heartbeat(
                        f"bench-node-{j}-{n}",
                        ttl_ms=10_000,
                        status=statuses[(j, n)],
                        busy=True,
                        lease_ms=1,
                    )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
    finally:
        await client.aclose()


class _Connection:
    """One keep-alive HTTP/1.1 connection: GET and read the whole answer."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.head = f"Host: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n\r\n"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, path: str) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        self.writer.write(f"GET {path} HTTP/1.1\r\n{self.head}".encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        length = 0
        close = False
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.lower() == "content-length":
                length = int(value)
            elif name.lower() == "connection" and value.strip().lower() == "close":
                close = True
        await self.reader.readexactly(length)
        if close:
            self.close()
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def _client(
    port: int, token: str, paths: list[str], until: float, out: list[tuple[float, int]], n: int
) -> None:
    connection = _Connection(port, token)
    i = n
    try:
        while time.monotonic() < until:
            path = paths[i % len(paths)]
            i += 1
            start = time.monotonic()
            try:
                status = await connection.get(path)
            except (OSError, asyncio.IncompleteReadError, ValueError):
                connection.close()
                status = 0
            out.append((time.monotonic() - start, status))
    finally:
        connection.close()


async def _stream(port: int, token: str, job: str, until: float, gaps: list[float]) -> int:
    """Read a live stream until *until*; the gaps between its fleet events go to *gaps*;
    the number of fleet events it got."""
    events = 0
    last = None
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"GET /api/v1/live?job={job}&max_seconds=3600 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {token}\r\n\r\n".encode()
        )
        await reader.readuntil(b"\r\n\r\n")
        while time.monotonic() < until:
            try:
                line = await asyncio.wait_for(
                    reader.readline(), max(0.01, until - time.monotonic())
                )
            except TimeoutError:
                break
            if not line:
                break
            if b"event: fleet" in line:
                now = time.monotonic()
                if last is not None:
                    gaps.append(now - last)
                last = now
                events += 1
    finally:
        writer.close()
    return events


def _percentile(values: list[float], share: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def run_manager_bench(
    redis_url: str,
    key_prefix: str,
    *,
    clients: int = 50,
    streams: int = 20,
    seconds: float = 60.0,
    jobs: int = 5,
    nodes_per_job: int = 4,
) -> ManagerResult:
    """See the module docstring."""
    prefix = f"{key_prefix}mgr{os.getpid()}"
    folder = Path(tempfile.mkdtemp(prefix="crawlfleet-bench-manager-"))
    db_url = f"sqlite:///{folder / 'state.sqlite3'}"
    db = StateDB.open(db_url)
    db.upgrade()
    token = create_token(db, "bench", "viewer")
    db.close()
    port = free_port()
    argv = [sys.executable, "-m", "crawlfleet.cli.main", "manager", "serve", "--port", str(port)]
    argv += ["--db", db_url, "--redis-url", redis_url, "-s", f"CRAWLFLEET_KEY_PREFIX={prefix}"]
    env = {**os.environ, "CRAWLFLEET_DATA_DIR": str(folder)}
    with (folder / "manager.log").open("wb") as log:
        manager = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            if manager.poll() is not None:
                raise RuntimeError(
                    f"the manager exited: {(folder / 'manager.log').read_text()[-2000:]}"
                )
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the manager did not answer within 60 s")
            time.sleep(0.2)
        return asyncio.run(
            _load(manager.pid, port, token, redis_url, prefix, clients, streams, seconds, jobs,
                  nodes_per_job)
        )  # fmt: skip
    finally:
        manager.terminate()
        try:
            manager.wait(15)
        except subprocess.TimeoutExpired:
            manager.kill()
            manager.wait(5)
        asyncio.run(_clean(redis_url, prefix))


async def _clean(redis_url: str, prefix: str) -> None:
    client = make_client(redis_url)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


async def _load(
    pid: int,
    port: int,
    token: str,
    redis_url: str,
    prefix: str,
    clients: int,
    streams: int,
    seconds: float,
    jobs: int,
    nodes: int,
) -> ManagerResult:
    stop = asyncio.Event()
    beating = asyncio.create_task(_beat(redis_url, prefix, jobs, nodes, stop))
    await asyncio.sleep(1.5)  # every node has beaten once
    paths = ["/api/v1/jobs"]
    paths += [f"/api/v1/jobs/bench-job-{j}" for j in range(jobs)]
    paths += ["/api/v1/nodes"]
    process = psutil.Process(pid)
    cpu = process.cpu_times()
    start = time.monotonic()
    until = start + seconds
    answers: list[tuple[float, int]] = []
    gaps: list[list[float]] = [[] for _ in range(streams)]
    stream_tasks = [
        asyncio.create_task(_stream(port, token, f"bench-job-{i % jobs}", until, gaps[i]))
        for i in range(streams)
    ]
    client_tasks = [
        asyncio.create_task(_client(port, token, paths, until, answers, n)) for n in range(clients)
    ]
    events = await asyncio.gather(*stream_tasks)
    await asyncio.gather(*client_tasks)
    wall = time.monotonic() - start
    used = process.cpu_times()
    cpu_seconds = (used.user - cpu.user) + (used.system - cpu.system)
    stop.set()
    await beating
    ok = [t for t, status in answers if status == 200]
    every_gap = [g for one in gaps for g in one]
    return ManagerResult(
        clients=clients,
        streams=streams,
        jobs=jobs,
        nodes=jobs * nodes,
        seconds=round(wall, 2),
        requests=len(ok),
        requests_per_second=round(len(ok) / wall, 1),
        p50_ms=round(_percentile(ok, 0.50) * 1000, 1),
        p99_ms=round(_percentile(ok, 0.99) * 1000, 1),
        errors_5xx=sum(1 for _, s in answers if s >= 500),
        errors_other=sum(1 for _, s in answers if s != 200 and s < 500),
        cpu_ms_per_request=round(cpu_seconds * 1000 / max(1, len(ok)), 3),
        cpu_cores=round(cpu_seconds / wall, 2),
        stream_gap_median_s=round(statistics.median(every_gap), 2) if every_gap else 0.0,
        stream_gap_max_s=round(max(every_gap), 2) if every_gap else 0.0,
        stream_events=[min(events), max(events)] if events else [],
    )
