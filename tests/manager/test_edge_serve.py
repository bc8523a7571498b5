"""A real manager (uvicorn, loopback) under oversized bodies: each is answered before
it is read, whoever sends it, its memory stays flat and ``/healthz`` keeps answering."""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from crawlfleet.redis.embedded import free_port
from tests.support.manager import manager_command
from tests.support.paths import ROOT

MIB = 2**20


def raw_post(
    port: int, path: str, length: int, token: str | None, sent: int
) -> tuple[int, dict[str, Any]]:
    """POST declaring *length* bytes, send only *sent* of them, and read the answer
    (which must come although the rest of the body never does): (status, JSON)."""
    head = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
    head += ["Content-Type: application/json", f"Content-Length: {length}"]
    if token:
        head.append(f"Authorization: Bearer {token}")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + b"x" * sent)
        data = b""
        while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < _length(data):
            piece = s.recv(65536)
            if not piece:
                break
            data += piece
    status = int(data.split(b" ", 2)[1])
    return status, json.loads(data.partition(b"\r\n\r\n")[2])


def _length(data: bytes) -> int:
    for line in data.partition(b"\r\n\r\n")[0].split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


@pytest.mark.timing  # /healthz's latency while bodies are refused: alone, not beside 3 workers
def test_oversized_bodies_are_answered_unread_and_cost_no_memory(
    tmp_path: Path, redis_server_url: str, key_prefix: str
) -> None:
    db = f"sqlite:///{tmp_path / 'state.sqlite3'}"
    tokens = {
        role: manager_command("token", "create", role, "--role", role, db=db).stdout.split()[-1]
        for role in ("viewer", "operator")
    }
    port = free_port()
    log = tmp_path / "manager.log"
    argv = [sys.executable, "-m", "crawlfleet.cli.main", "manager", "serve", "--port", str(port)]
    argv += [
        "--db",
        db,
        "--redis-url",
        redis_server_url,
        "-s",
        f"CRAWLFLEET_KEY_PREFIX={key_prefix}",
    ]
    argv += ["-s", f"CRAWLFLEET_DATA_DIR={tmp_path / 'data'}"]
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    latencies: list[float] = []
    stop = threading.Event()

    def watch_health() -> None:
        with httpx.Client(base_url=base, timeout=5) as client:
            while not stop.is_set():
                began = time.perf_counter()
                assert client.get("/healthz").status_code == 200
                latencies.append(time.perf_counter() - began)
                time.sleep(0.02)

    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{base}/healthz", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        rss = psutil.Process(proc.pid)
        httpx.get(f"{base}/api/v1/jobs", headers={"Authorization": f"Bearer {tokens['viewer']}"})
        before = rss.memory_info().rss
        watcher = threading.Thread(target=watch_health, daemon=True)
        watcher.start()
        seeds = "/api/v1/jobs/edge/seeds"
        for size in (200 * MIB, 50 * MIB):
            for token in (None, tokens["viewer"], tokens["operator"]):
                status, body = raw_post(port, seeds, size, token, sent=64 * 1024)
                assert status == 413 and body["error"]["code"] == "too_large", body
        # no length declared: counted as it comes, refused at the bound
        streamed = 0

        def stream_of(total: int) -> Iterator[bytes]:
            nonlocal streamed
            while streamed < total:
                streamed += 256 * 1024
                yield b"x" * (256 * 1024)

        for token in (None, tokens["operator"]):
            streamed = 0
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            r = httpx.post(base + seeds, content=stream_of(200 * MIB), headers=headers, timeout=30)
            assert r.status_code == (401 if token is None else 413), r.text
            assert streamed < 20 * MIB, streamed  # cut off, not 200 MB read
        grown = rss.memory_info().rss - before
        wait_until = time.monotonic() + 10
        while len(latencies) < 20 and time.monotonic() < wait_until:
            time.sleep(0.05)
        stop.set()
        watcher.join(10)
        median, worst = statistics.median(latencies) * 1000, max(latencies) * 1000
        print(
            f"manager RSS grew {grown / MIB:.1f} MiB; /healthz: {len(latencies)} answers, "
            f"median {median:.1f} ms, max {worst:.1f} ms"
        )
        assert grown < 20 * MIB, f"the manager grew {grown / MIB:.1f} MiB"
        assert latencies, "no /healthz answer while bodies were refused"
        # loose bounds (a shared 2-core machine): what the issue saw was a 1.2 s stall
        assert statistics.median(latencies) < 0.1 and max(latencies) < 1.0, latencies
    finally:
        stop.set()
        proc.terminate()
        proc.wait(15)
    assert "Traceback" not in log.read_text()
