"""A Redis Cluster node is refused with one clear line, by commands and by nodes, before
anything is written (a job is not sharded over a cluster yet)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlfleet.node.launcher import start_node, wait_all
from tests.pipelines.redisproc import RedisProcess

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cluster_node(tmp_path: Path) -> Iterator[RedisProcess]:
    node = RedisProcess(tmp_path / "cluster", ("--cluster-enabled", "yes"))
    node.start()
    try:
        yield node
    finally:
        node.close()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawlfleet.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_commands_and_nodes_refuse_a_cluster_node(
    cluster_node: RedisProcess, tmp_path: Path
) -> None:
    url = cluster_node.url
    for args, code in (
        (["seed", "shop", "https://a.example/"], 2),  # the traceback of old
        (["limits", "set", "--fleet", "*", "2/1s"], 2),
        (["job", "list"], 1),
        (["status"], 1),
    ):
        r = cli(*args, "--redis-url", url)
        assert r.returncode == code, (args, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "a Redis Cluster node" in lines[0], (args, r.stderr)
    log = tmp_path / "node.log"
    node = start_node(
        "crawlfleet.testsite.spider:TestSiteSpider",
        job="shop",
        redis_url=url,
        log=log,
        spider_args={"start_urls": "http://127.0.0.1:9/"},
        cwd=ROOT,
    )
    assert wait_all([node], 60) != [0]
    text = log.read_text()
    assert "points at a Redis Cluster node" in text and "Traceback" not in text, text[-3000:]
