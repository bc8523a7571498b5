"""What a node publishes about itself with each heartbeat (``<job>:nodeinfo``).

``crawlfleet status``, the dashboard and the manager read it. :func:`node_status` gives,
in order (a later key wins):

- who the node is: ``node``, ``host``, ``ip``, ``pid``, ``job``, ``spider``,
  ``version``, ``started`` (epoch seconds);
- what it holds: ``buffered`` (leased, ready), ``in_progress`` (in the engine's hands),
  ``held`` (leases), ``items_waiting`` (for the item stores), ``failures_waiting`` (for
  the error registry);
- what it did: ``pages``, ``items``, ``done`` (acknowledged); ``sites``: per-site
  figures of the sites it holds leases of;
- the dict of every status provider, in order (telemetry, feedback, the item stores,
  ...: ``parts_of(crawler).status_providers``); one that fails is skipped, and logged
  with its traceback once, then once a minute;
- its steering: ``state`` and concurrency; the state reads
  :data:`~crawlfleet.node.backlog.WAITING_FOR_STORE` instead of ``running`` while the
  node waits for its item stores.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from scrapy import Spider

from crawlfleet import __version__
from crawlfleet.frontier.config import FrontierConfig
from crawlfleet.node.backlog import WAITING_FOR_STORE, Backlog
from crawlfleet.node.ledger import Ledger
from crawlfleet.node.siterates import SiteRates
from crawlfleet.node.stats import NodeStats
from crawlfleet.node.steering import Steering
from crawlfleet.outage import Failures
from crawlfleet.parts import StatusProvider

__all__ = ["node_status"]

logger = logging.getLogger(__name__)

#: the failures of each status provider that failed (by name): said once, then once a
#: minute, whatever heartbeat asks
_PROVIDER_FAILURES: dict[str, Failures] = {}


def node_status(
    node_id: str,
    config: FrontierConfig,
    spider: Spider | None,
    started: float,
    *,
    ledger: Ledger,
    stats: NodeStats,
    site_rates: SiteRates,
    backlog: Backlog,
    steering: Steering,
    providers: list[StatusProvider],
) -> dict[str, Any]:
    """The status of node *node_id* (started at *started*, epoch seconds) now: see the
    module docstring."""
    status: dict[str, Any] = {
        "node": node_id,
        "host": socket.gethostname(),
        "ip": config.node_ip,
        "pid": os.getpid(),
        "job": config.job,
        "spider": getattr(spider, "name", ""),
        "version": __version__,
        "started": started,
        "buffered": ledger.ready,
        "in_progress": len(ledger.handed),
        "held": len(ledger.held),
        "pages": stats.get("response_received_count"),
        "items": stats.get("item_scraped_count"),
        "done": stats.get("crawlfleet/frontier/acked"),
        "sites": site_rates.figures(ledger.held.values()),
        "items_waiting": backlog.waiting(),
        "failures_waiting": len(ledger.recorded),
    }
    for provider in providers:
        name = getattr(provider, "__qualname__", type(provider).__qualname__)
        failures = _PROVIDER_FAILURES.get(name)
        try:
            status.update(provider())
        except Exception:
            if failures is None:
                failures = _PROVIDER_FAILURES[name] = Failures(f"status provider {name}", logger)
            failures.failed()
        else:
            if failures is not None:
                failures.succeeded()
    status.update(steering.status())
    if status["state"] == "running" and backlog.waiting_for_store:
        status["state"] = WAITING_FOR_STORE
    return status
