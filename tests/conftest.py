"""Shared fixtures: a real Redis for every test, a key prefix of its own, the settings
of its node processes.

Redis: the server at 127.0.0.1:6379 when one answers (each test gets its own key
prefix, cleaned up afterwards); otherwise an embedded Redis started for the session.
Set CRAWLFLEET_TEST_REDIS_URL to use another server.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from crawlfleet.redis.embedded import EmbeddedRedis
from tests.support.redis_server import DEFAULT_URL, URL_ENV, answers


@pytest.fixture(scope="session")
def redis_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real Redis for the whole session."""
    url = os.environ.get(URL_ENV, DEFAULT_URL)
    if answers(url):
        yield url
        return
    print(f"\nNo Redis at {url}: starting an embedded one for the tests")
    embedded = EmbeddedRedis(tmp_path_factory.mktemp("redis"))
    yield embedded.acquire()
    embedded.release()


@pytest.fixture
def key_prefix(redis_server_url: str) -> Iterator[str]:
    """A key prefix of this test's own; its keys are deleted afterwards."""
    prefix = f"cft{uuid.uuid4().hex[:10]}"
    yield prefix
    client = redis.Redis.from_url(redis_server_url)
    try:
        batch = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for i in range(0, len(batch), 500):
            client.delete(*batch[i : i + 500])
    finally:
        client.close()


@pytest.fixture
def sync_redis(redis_server_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server_url)
    yield client
    client.close()


@pytest.fixture
def node_env(redis_server_url: str, key_prefix: str, tmp_path: Path) -> dict[str, str]:
    """Settings for node processes of this test: its Redis, its key prefix; retries wait
    50 ms in the frontier, not the default 1 s doubling (tests of other things retry
    429s and 503s many times; tests of the back-off set their own)."""
    return {
        "CRAWLFLEET_KEY_PREFIX": key_prefix,
        "CRAWLFLEET_DATA_DIR": str(tmp_path / "data"),
        "CRAWLFLEET_RETRY_BACKOFF": "0.05",
        "CRAWLFLEET_RETRY_BACKOFF_MAX": "2",
    }


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """CRAWLFLEET_TEST_PASS (set by ./dev.sh test): "parallel" keeps the tests not marked
    ``timing``, "timing" only those; unset, every test runs."""
    wanted = os.environ.get("CRAWLFLEET_TEST_PASS", "")
    if wanted not in ("parallel", "timing"):
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        timing = item.get_closest_marker("timing") is not None
        (keep if timing == (wanted == "timing") else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
