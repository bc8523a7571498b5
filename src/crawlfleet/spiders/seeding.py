"""Seeds: turning plain URLs or JSON entries into requests for the frontier.

The entry format is scrapy-redis's: a plain URL, or a JSON object
``{"url": ..., "meta": {...}, "priority": N}``. The same format is accepted from a
Redis seed list (``<spider>:start_urls``), from ``crawlfleet seed`` arguments and from
seed files (one entry per line).
"""

from __future__ import annotations

import json

from scrapy import Request

from crawlfleet.settings.config import redact_url
from crawlfleet.urls import check_http_url

__all__ = ["SEED_KEYS", "check_seed_url", "judge_seed", "parse_seed"]

SEED_KEYS = frozenset({"url", "meta", "priority"})


def parse_seed(raw: bytes | str) -> Request:
    """The request for one seed entry: an http(s) URL with a host, judged as given
    (:func:`crawlfleet.urls.check_http_url`) before Scrapy normalises it. Raises
    ValueError saying what is wrong (a seed that is not UTF-8 text, not a URL, not
    http(s), with no host, or a JSON entry of the wrong shape)."""
    seed = judge_seed(raw)
    return Request(seed) if isinstance(seed, str) else seed


def judge_seed(raw: bytes | str) -> str | Request:
    """Seed entry *raw* judged as :func:`parse_seed` judges it (the same ValueError),
    without building a request for a plain URL: the URL (stripped), whose request is
    ``Request(url)``; a JSON entry's request. For callers that queue plain URLs by the
    million (:mod:`crawlfleet.fleet.seedform`)."""
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    text = text.strip()
    if not text:
        raise ValueError("empty seed")
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"invalid JSON seed: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("url"), str):
            raise ValueError("JSON seed needs a string 'url'")
        unknown = set(data) - SEED_KEYS
        if unknown:
            raise ValueError(f"unknown seed keys {sorted(unknown)}")
        meta = data.get("meta") or {}
        if not isinstance(meta, dict):
            raise ValueError("seed 'meta' must be an object")
        priority = data.get("priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise ValueError("seed 'priority' must be an integer")
        check_seed_url(data["url"])
        return Request(data["url"], meta=meta, priority=priority)
    check_seed_url(text)
    return text


def check_seed_url(url: str) -> None:
    """Raise ValueError ("seed URL has no host: https:///path") unless *url* is an
    http(s) URL with a host as crawlfleet reads it; a password in it is not repeated."""
    try:
        check_http_url(url)
    except ValueError as exc:
        raise ValueError(f"seed URL {exc}: {redact_url(url.strip())}") from None
