"""The delaying TCP proxy the field benchmark puts between nodes and Redis."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import redis

from crawlfleet.benchmark.delay import DelayProxy, start_delay_proxy, stop_delay_proxy


@pytest.fixture
def redis_port(redis_server_url: str) -> int:
    port = urlsplit(redis_server_url).port
    assert port is not None
    return port


def _ping_ms(port: int, rounds: int = 10) -> float:
    client = redis.Redis(port=port)
    client.ping()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        client.ping()
        best = min(best, time.perf_counter() - start)
    client.close()
    return best * 1000


@pytest.fixture
def delayed(redis_port: int) -> Iterator[int]:
    proc, port = start_delay_proxy(redis_port, 40)
    try:
        yield port
    finally:
        stop_delay_proxy(proc)


def test_a_round_trip_takes_the_delay_more_and_data_pass_whole(delayed: int) -> None:
    assert 40 <= _ping_ms(delayed) < 400  # never quicker than the delay
    client = redis.Redis(port=delayed)
    big = bytes(range(256)) * 4096  # 1 MiB: many chunks, kept in order
    client.set("cf-test:delay", big)
    assert client.get("cf-test:delay") == big
    client.delete("cf-test:delay")
    client.close()


def test_wrong_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="delay must be >= 0 ms"):
        DelayProxy(6379, -1)
    with pytest.raises(ValueError, match="target port"):
        DelayProxy(0, 5)
