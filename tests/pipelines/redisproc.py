"""A Redis server process of a test's own, to stop (kill -9) and start again.

It persists every write (AOF, fsync always) in its directory, so what it acknowledged
survives the kill, as on a production Redis with AOF on.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

from crawlfleet.redis.embedded import find_redis_server

__all__ = ["RedisProcess"]


def _free_port(highest: int = 65535) -> int:
    """A free loopback port, at most *highest* (a cluster node also uses port + 10000)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port <= highest:
            return port
    raise RuntimeError(f"no free loopback port at most {highest} in 200 tries")


class RedisProcess:
    """``redis-server`` on a free loopback port with its data in *directory*, and
    *options* of its command line (``("--cluster-enabled", "yes")``)."""

    def __init__(self, directory: Path, options: tuple[str, ...] = ()) -> None:
        self.dir = directory
        self.options = options
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port(55535 if "--cluster-enabled" in options else 65535)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start (again, same port and data) and wait until it answers."""
        args = [
            find_redis_server(),
            "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
            "--appendonly", "yes", "--appendfsync", "always", "--save", "",
            "--logfile", str(self.dir / "redis.log"), *self.options,
        ]  # fmt: skip
        self._proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5)
            try:
                if client.ping():
                    return
            except redis.RedisError:
                time.sleep(0.05)
            finally:
                client.close()
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def freeze(self) -> None:
        """SIGSTOP: connections stay open and nothing answers (a hung Redis)."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT: it answers again, with everything it had."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """kill -9: connections are cut, the port refuses connections."""
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.wait(10)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.kill()
