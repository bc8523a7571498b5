"""The seed key a node reads (scrapy-redis compatible): the spider's start-URL key (see
:mod:`crawlfleet.node.redisspider`), a Redis list, set or sorted set of URLs or JSON
seeds. One node at a time reads a batch (the key's reader lock), queues it into the
frontier (seen-filter, priority, politeness), then removes it from the key: queued
first, so a node that dies in between leaves the batch to the next reader and the
seen-filter drops what it had queued already. An entry no request can be made from is
set aside (``<key>:crawlfleet:unreadable``) with a WARNING naming the key."""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from scrapy import Request, Spider

from crawlfleet.frontier.records import SEED_KINDS
from crawlfleet.node.core import NodeCore
from crawlfleet.node.ledger import Outbound
from crawlfleet.redis.keys import seed_keys
from crawlfleet.spiders.seeding import check_seed_url, parse_seed

__all__ = ["BUSY_RETRY_SECONDS", "SeedReader", "requests_from_seed"]

logger = logging.getLogger(__name__)

#: While another node reads the seed key, look again this soon.
BUSY_RETRY_SECONDS = 0.2


def _json_object(raw: bytes) -> dict[str, Any] | None:
    """*raw* as a JSON object, or None when it is not one."""
    if not raw.lstrip().startswith(b"{"):
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _scrapy_redis_own(spider: Spider) -> bool:
    """The spider makes its requests with scrapy-redis's own ``make_request_from_data``
    (not one of its own), which turns every JSON key it does not know into form data."""
    module = sys.modules.get("scrapy_redis.spiders")
    mixin = getattr(module, "RedisMixin", None)
    own = getattr(type(spider), "make_request_from_data", None)
    return mixin is not None and own is mixin.make_request_from_data


def requests_from_seed(spider: Spider | None, raw: bytes) -> list[Request]:
    """The requests of seed entry *raw*, as read from Redis (bytes). With the spider's
    ``make_request_from_data`` where it has one (a scrapy-redis spider decides itself:
    a request, several, or none), else :func:`parse_seed`. A JSON entry's integer
    ``"priority"`` is kept: given to requests made at priority 0 (scrapy-redis's own
    method does not see it: it would send it as form data). Every URL is judged by
    crawlfleet's rule (:func:`~crawlfleet.spiders.seeding.check_seed_url`): the entry
    as given where scrapy-redis's own method reads it, and each request made."""
    make = getattr(spider, "make_request_from_data", None)
    if spider is None or not callable(make):
        return [parse_seed(raw)]
    entry = _json_object(raw)
    priority = entry.get("priority") if entry is not None else None
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise ValueError("seed 'priority' must be an integer")
    data = raw
    own = _scrapy_redis_own(spider)
    if own:  # its entries are URLs: judged as given, before Scrapy normalises them
        url = entry.get("url") if entry is not None else raw.decode("utf-8")
        if isinstance(url, str):
            check_seed_url(url)
    if entry is not None and priority is not None and own:
        data = json.dumps({k: v for k, v in entry.items() if k != "priority"}).encode()
    made = make(data)
    if isinstance(made, Request):
        requests = [made]
    elif isinstance(made, Iterable) and not isinstance(made, str | bytes | dict):
        requests = list(made)
    elif made is None:
        requests = []
    else:
        raise TypeError(f"make_request_from_data returned {type(made).__name__}")
    for request in requests:
        if not isinstance(request, Request):
            raise TypeError(f"make_request_from_data gave a {type(request).__name__}")
        check_seed_url(request.url)  # a spider's own method may make any URL
    if not requests:
        raise ValueError("make_request_from_data made no request of it")
    if priority is not None:
        requests = [r.replace(priority=priority) if r.priority == 0 else r for r in requests]
    return requests


class SeedReader:
    """Reads batches of the seed key of *core*'s config (``start_urls_key``,
    ``start_urls_batch`` entries at a time) while it has entries, else looks again after
    a while; the node holds the key's reader lock for a lease's time
    (CRAWLFLEET_LEASE_SECONDS) at most per batch."""

    def __init__(self, core: NodeCore) -> None:
        self.core = core
        config = core.config
        self.key = config.start_urls_key
        self.batch = config.start_urls_batch
        self.lock_ms = int(config.lease_seconds * 1000)
        #: the key had entries at the last read (the job is not finished)
        self.waiting = False
        #: monotonic time of the next read
        self.next_at = 0.0
        #: monotonic time the last read began that saw the whole key (not "busy")
        self.read_at = -math.inf
        self._said_kind = ""

    async def pull(
        self,
        make: Callable[[bytes], list[Outbound]],
        queue: Callable[[list[Outbound]], Awaitable[None]],
        idle_delay: float,
    ) -> None:
        """Read one batch; *make* turns an entry into outbound requests, *queue*
        commits them to the frontier; with nothing to read, wait *idle_delay* (at
        least 1 s) before the next read."""
        began = time.monotonic()
        core = self.core
        batch = await core.frontier.read_seeds(self.key, self.batch, core.node_id, self.lock_ms)
        self.waiting = batch.left > 0
        if batch.kind != "busy":
            self.read_at = began
        if batch.kind not in SEED_KINDS:
            if batch.kind not in ("none", "busy") and batch.kind != self._said_kind:
                self._said_kind = batch.kind
                logger.warning(
                    "Seed key %s is a Redis %s: seeds are read from a list, a set or a "
                    "sorted set; nothing read from it",
                    self.key,
                    batch.kind,
                )
            wait = BUSY_RETRY_SECONDS if batch.kind == "busy" else max(idle_delay, 1.0)
            self.next_at = time.monotonic() + wait
            return
        outgoing: list[Outbound] = []
        unreadable: list[bytes] = []
        for raw in batch.entries:
            try:
                outgoing.extend(make(raw))
            except Exception as exc:  # the spider's own code too: set aside, go on
                logger.warning(
                    "Unreadable seed %r in %s set aside in %s: %s",
                    raw[:200],
                    self.key,
                    seed_keys(self.key).unreadable,
                    exc,
                )
                unreadable.append(raw)
                core.stats.inc("crawlfleet/seeds/invalid")
        await queue(outgoing)
        await core.frontier.done_seeds(self.key, core.node_id, batch, unreadable)
        core.stats.inc("crawlfleet/seeds/read", len(batch.entries))
        self.next_at = 0.0
