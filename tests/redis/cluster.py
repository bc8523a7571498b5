"""A local Redis Cluster for tests: three masters with a replica each on loopback,
made with plain cluster commands (no redis-cli), and torn down afterwards."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from tests.pipelines.redisproc import RedisProcess

__all__ = ["LocalCluster", "local_cluster"]

SLOTS = 16384


class LocalCluster:
    def __init__(self, directory: Path, masters: int = 3) -> None:
        options = ("--cluster-enabled", "yes", "--cluster-node-timeout", "2000")
        self.nodes = [RedisProcess(directory / f"n{i}", options) for i in range(2 * masters)]
        self.masters = masters

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def client(self, i: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.nodes[i].port, socket_timeout=5)

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        first = self.client(0)
        for node in self.nodes[1:]:
            first.execute_command("CLUSTER MEET", "127.0.0.1", node.port)
        share = SLOTS // self.masters
        for i in range(self.masters):
            end = SLOTS - 1 if i == self.masters - 1 else (i + 1) * share - 1
            self.client(i).execute_command("CLUSTER ADDSLOTS", *range(i * share, end + 1))
        ids = [self.client(i).execute_command("CLUSTER MYID") for i in range(self.masters)]
        self._until(lambda: all(self._knows(i, ids) for i in range(len(self.nodes))))
        for i in range(self.masters):
            self.client(self.masters + i).execute_command("CLUSTER REPLICATE", ids[i])
        self._until(self._ok)

    def _nodes(self, i: int) -> dict[str, dict[str, object]]:
        """CLUSTER NODES as node *i* sees it: address -> its fields (node_id, flags,
        master_id, ...)."""
        return dict(self.client(i).execute_command("CLUSTER NODES"))

    def _knows(self, i: int, ids: list[bytes]) -> bool:
        seen = {str(n["node_id"]) for n in self._nodes(i).values()}
        return all(node_id.decode() in seen for node_id in ids)

    def _ok(self) -> bool:
        if any(
            self.client(i).execute_command("CLUSTER INFO")["cluster_state"] != "ok"
            for i in range(len(self.nodes))
        ):
            return False
        replicas = [n for n in self._nodes(0).values() if "slave" in str(n["flags"])]
        return len(replicas) == len(self.nodes) - self.masters

    @staticmethod
    def _until(check: object, seconds: float = 30.0) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                if check():  # type: ignore[operator]
                    return
            time.sleep(0.1)
        raise RuntimeError("the local Redis Cluster did not come up")

    def master_of(self, key: str) -> int:
        """Index of the node that serves *key*'s slot now."""
        slot = int(self.client(0).execute_command("CLUSTER KEYSLOT", key))
        for i in range(len(self.nodes)):
            role = self.client(i).execute_command("ROLE")[0]
            if role != b"master":
                continue
            for entry in self.client(i).execute_command("CLUSTER SLOTS"):
                start, end, primary = int(entry[0]), int(entry[1]), entry[2]
                if start <= slot <= end and int(primary[1]) == self.nodes[i].port:
                    return i
        raise RuntimeError(f"no master serves {key}")

    def fail_over(self, key: str) -> tuple[int, int]:
        """Promote the replica of *key*'s master (CLUSTER FAILOVER, coordinated: the
        replica catches up first); (old master, new master) indexes."""
        old = self.master_of(key)
        old_id = self.client(old).execute_command("CLUSTER MYID").decode()
        ports = [node.port for node in self.nodes]
        replica = next(
            ports.index(int(address.rsplit(":", 1)[1]))
            for address, node in self._nodes(old).items()
            if node["master_id"] == old_id
        )
        self.client(replica).execute_command("CLUSTER FAILOVER")
        self._until(lambda: self.master_of(key) == replica)
        return old, replica

    def close(self) -> None:
        for node in self.nodes:
            node.close()


@contextlib.contextmanager
def local_cluster(directory: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(directory)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
