"""The Redis the tests talk to: the server at :data:`DEFAULT_URL` when one answers, or
the one ``CRAWLFLEET_TEST_REDIS_URL`` names; the fixture ``redis_server_url``
(tests/conftest.py) starts an embedded one for the session when neither answers."""

from __future__ import annotations

import redis

__all__ = ["DEFAULT_URL", "URL_ENV", "answers"]

#: The Redis tried first.
DEFAULT_URL = "redis://127.0.0.1:6379/0"
#: The environment variable naming another Redis to test against.
URL_ENV = "CRAWLFLEET_TEST_REDIS_URL"


def answers(url: str) -> bool:
    """Whether a Redis at *url* answers a PING within a second."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False
