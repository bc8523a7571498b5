"""Redis servers of a run's own on loopback: one process (:class:`RedisProcess`), or a
Redis Cluster of them (:class:`LocalCluster`), for the benchmark's scale runs and the
test suite. Nothing here is used by a node or the manager.

A cluster is formed with plain cluster commands (CLUSTER MEET, ADDSLOTS, REPLICATE),
so no ``redis-cli`` is needed; its nodes' ports stay below 55536 (a cluster node also
listens on its port + 10000).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis

from crawlfleet.redis.embedded import find_redis_server, free_port

__all__ = ["LocalCluster", "RedisProcess", "local_cluster"]

SLOTS = 16384
#: Options of every cluster node: a fail-over starts after 2 s without its master.
CLUSTER_OPTIONS = ("--cluster-enabled", "yes", "--cluster-node-timeout", "2000")


def _cmd(client: redis.Redis, *args: Any) -> Any:
    """A Redis command by name (cluster commands have no typed method)."""
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


#: A cluster node's bus listens this far above its port.
BUS_OFFSET = 10000


class RedisProcess:
    """``redis-server`` (*server*, by default the one the embedded Redis uses) on a free
    loopback port with its data in *directory*, and *options* of its command line.
    With *persist* it writes every change to its AOF (fsync always), so that what it
    acknowledged survives a kill -9, as on a production Redis with AOF on; without, it
    writes nothing to disk (a benchmark's)."""

    def __init__(
        self,
        directory: Path,
        options: tuple[str, ...] = (),
        *,
        persist: bool = True,
        server: str | None = None,
    ) -> None:
        self.dir = directory
        self.options = options
        self.persist = persist
        self.server = server
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = self._free_port()
        self._started = False
        self._proc: subprocess.Popen[bytes] | None = None

    def _free_port(self) -> int:
        """A free loopback port for this server; a cluster node's bus port free too."""
        return free_port(also=BUS_OFFSET if "--cluster-enabled" in self.options else 0)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self) -> None:
        """Start (again, same port and data) and wait until it answers. The first start
        takes another free port when the server could not bind its own (another
        process took it meanwhile): up to 5 ports."""
        for _ in range(5):
            if self._start_once():
                self._started = True
                return
            if self._started:
                break
            self.port = self._free_port()
        raise RuntimeError(f"redis-server did not start on port {self.port} (see {self.dir})")

    def _start_once(self) -> bool:
        """Start the server on :attr:`port`: True once it answers, False if it exited
        first or did not answer within 15 s (it is then killed)."""
        aof = ("yes", "--appendfsync", "always") if self.persist else ("no",)
        args = [
            self.server or find_redis_server(),
            "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
            "--appendonly", *aof, "--save", "",
            "--logfile", str(self.dir / "redis.log"), *self.options,
        ]  # fmt: skip
        self._proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5)
            try:
                # this server's answer, not one of another process that holds the port
                if client.info("server").get("process_id") == self._proc.pid:
                    return True
                if self._proc.poll() is not None:
                    return False
                time.sleep(0.05)
            except redis.RedisError:
                if self._proc.poll() is not None:
                    return False
                time.sleep(0.05)
            finally:
                client.close()
        self._proc.kill()
        self._proc.wait()
        return False

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

    def stop(self) -> None:
        """Stop it cleanly (SIGTERM; kill -9 after 30 s)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.kill()


class LocalCluster:
    """*masters* masters with *replicas* replicas each (0 or 1), slots shared evenly.
    *persist* and *server*: as :class:`RedisProcess`."""

    def __init__(
        self,
        directory: Path,
        masters: int = 3,
        replicas: int = 1,
        *,
        persist: bool = True,
        server: str | None = None,
    ) -> None:
        count = masters * (1 + replicas)
        self.nodes = [
            RedisProcess(directory / f"n{i}", CLUSTER_OPTIONS, persist=persist, server=server)
            for i in range(count)
        ]
        self.masters = masters

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def client(self, i: int) -> redis.Redis:
        return self.nodes[i].client()

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        first = self.client(0)
        for node in self.nodes[1:]:
            _cmd(first, "CLUSTER MEET", "127.0.0.1", node.port)
        share = SLOTS // self.masters
        for i in range(self.masters):
            end = SLOTS - 1 if i == self.masters - 1 else (i + 1) * share - 1
            _cmd(self.client(i), "CLUSTER ADDSLOTS", *range(i * share, end + 1))
        ids = [_cmd(self.client(i), "CLUSTER MYID") for i in range(self.masters)]
        self._until(lambda: all(self._knows(i, ids) for i in range(len(self.nodes))))
        for i in range(self.masters, len(self.nodes)):
            _cmd(self.client(i), "CLUSTER REPLICATE", ids[i % self.masters])
        self._until(self._ok)

    def _nodes(self, i: int) -> dict[str, dict[str, object]]:
        """CLUSTER NODES as node *i* sees it: address -> its fields (node_id, flags,
        master_id, ...)."""
        return dict(_cmd(self.client(i), "CLUSTER NODES"))

    def _knows(self, i: int, ids: list[bytes]) -> bool:
        seen = {str(n["node_id"]) for n in self._nodes(i).values()}
        return all(node_id.decode() in seen for node_id in ids)

    def _ok(self) -> bool:
        if any(
            _cmd(self.client(i), "CLUSTER INFO")["cluster_state"] != "ok"
            for i in range(len(self.nodes))
        ):
            return False
        replicas = [n for n in self._nodes(0).values() if "slave" in str(n["flags"])]
        return len(replicas) == len(self.nodes) - self.masters

    @staticmethod
    def _until(check: Callable[[], bool], seconds: float = 30.0) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                if check():
                    return
            time.sleep(0.1)
        raise RuntimeError("the local Redis Cluster did not come up")

    def master_of(self, key: str) -> int:
        """Index of the node that serves *key*'s slot now."""
        slot = int(_cmd(self.client(0), "CLUSTER KEYSLOT", key))
        for i in range(len(self.nodes)):
            role = _cmd(self.client(i), "ROLE")[0]
            if role != b"master":
                continue
            for entry in _cmd(self.client(i), "CLUSTER SLOTS"):
                start, end, primary = int(entry[0]), int(entry[1]), entry[2]
                if start <= slot <= end and int(primary[1]) == self.nodes[i].port:
                    return i
        raise RuntimeError(f"no master serves {key}")

    def fail_over(self, key: str) -> tuple[int, int]:
        """Promote the replica of *key*'s master (CLUSTER FAILOVER, coordinated: the
        replica catches up first); (old master, new master) indexes."""
        old = self.master_of(key)
        old_id = _cmd(self.client(old), "CLUSTER MYID").decode()
        ports = [node.port for node in self.nodes]
        replica = next(
            ports.index(int(address.rsplit(":", 1)[1]))
            for address, node in self._nodes(old).items()
            if node["master_id"] == old_id
        )
        _cmd(self.client(replica), "CLUSTER FAILOVER")
        self._until(lambda: self.master_of(key) == replica)
        return old, replica

    def close(self) -> None:
        for node in self.nodes:
            node.close()


@contextlib.contextmanager
def local_cluster(
    directory: Path,
    masters: int = 3,
    replicas: int = 1,
    *,
    persist: bool = True,
    server: str | None = None,
) -> Iterator[LocalCluster]:
    """A started :class:`LocalCluster`, closed (every node killed) afterwards."""
    cluster = LocalCluster(directory, masters, replicas, persist=persist, server=server)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
