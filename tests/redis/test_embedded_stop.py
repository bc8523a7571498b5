"""Nothing left running: a command that started the embedded Redis (no Redis URL
anywhere, outside a project) stops it when it ends, normally or by SIGTERM, SIGINT or
SIGHUP, unless another local process still uses it (then the last one stops it)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
import redis

from crawlfleet.redis.embedded import free_port

#: Every step here is bounded: a start, a stop, a Redis going away.
WAIT_SECONDS = 30.0


def bare_env() -> dict[str, str]:
    """This environment without a Redis URL, a state DB or a Scrapy project."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CRAWLFLEET_", "SCRAPY_")) and k != "REDIS_URL"
    }


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "crawlfleet.cli.main", *args]


class Manager:
    """``crawlfleet manager serve`` in *cwd*, as a subprocess, once it answers /healthz."""

    def __init__(self, cwd: Path) -> None:
        self.port = free_port()
        self.log = cwd / f"manager-{self.port}.log"
        argv = command("manager", "serve", "--port", str(self.port))
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=bare_env()
            )
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=2).is_success:
                    return
            except httpx.TransportError:
                pass
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.2)

    def stop(self, signum: int) -> int:
        self.proc.send_signal(signum)
        try:
            return self.proc.wait(WAIT_SECONDS)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def redis_pid(cwd: Path) -> int:
    return int((cwd / ".crawlfleet" / "redis" / "redis.pid").read_text())


def running(pid: int) -> bool:
    """Whether *pid* runs (a zombie does not: it has exited, nobody reaped it yet)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def gone_soon(pid: int) -> bool:
    deadline = time.monotonic() + WAIT_SECONDS
    while running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def kill_if_left(pid: int) -> None:
    if running(pid):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: signal.Signals(s).name
)
def test_a_manager_stopped_by_a_signal_stops_the_redis_it_started(
    tmp_path: Path, signum: int
) -> None:
    manager = Manager(tmp_path)
    pid = redis_pid(tmp_path)
    try:
        assert running(pid)
        code = manager.stop(signum)
        assert code in (0, -signum), manager.log.read_text()  # uvicorn ends by the signal
        assert gone_soon(pid), manager.log.read_text()
        assert "Stopped embedded Redis" in manager.log.read_text()
    finally:
        kill_if_left(pid)


def test_a_shared_redis_runs_until_its_last_user_stops(tmp_path: Path) -> None:
    first = Manager(tmp_path)
    second = Manager(tmp_path)  # joins the Redis of the same data directory
    pid = redis_pid(tmp_path)
    try:
        first.stop(signal.SIGTERM)
        time.sleep(0.5)
        assert running(pid), first.log.read_text()
        health = httpx.get(f"http://127.0.0.1:{second.port}/healthz", timeout=5).json()
        assert health["redis"] == "ok", health
        second.stop(signal.SIGTERM)
        assert gone_soon(pid), second.log.read_text()
    finally:
        for each in (first, second):
            if each.proc.poll() is None:
                each.proc.kill()
        kill_if_left(pid)


def test_a_command_that_ends_normally_stops_the_redis_it_started(tmp_path: Path) -> None:
    done = subprocess.run(
        command("health"),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=bare_env(),
        timeout=WAIT_SECONDS,
    )
    assert done.returncode == 0, done.stderr
    # Redis removes its pid file when it stops: its port says whether it still runs
    started = re.search(r"Started embedded Redis on 127\.0\.0\.1:(\d+)", done.stderr)
    assert started, done.stderr
    assert "Stopped embedded Redis" in done.stderr
    with pytest.raises(redis.ConnectionError):
        redis.Redis(port=int(started[1]), socket_connect_timeout=2).ping()
