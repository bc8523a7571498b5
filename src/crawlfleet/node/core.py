"""The parts of one node that its sync components all use, in one typed object.

The scheduler (:class:`~crawlfleet.node.scheduler.Scheduler`) builds one
:class:`NodeCore` and hands it to the sync loop, which passes it on to each component it
builds (:class:`~crawlfleet.node.leasing.Leaser`, :class:`~crawlfleet.node.control.Control`,
:class:`~crawlfleet.node.heartbeat.Heartbeat`, :class:`~crawlfleet.node.outbox.Outbox`,
:class:`~crawlfleet.node.leaving.Leaving`); a component takes as separate arguments only
what is its own (the components it drives, its callbacks). Not to be confused with
:class:`crawlfleet.parts.NodeParts`, the crawler-wide registry that middlewares and
extensions use to find the node.
"""

from __future__ import annotations

from dataclasses import dataclass

from crawlfleet.frontier.base import FrontierBackend
from crawlfleet.frontier.config import FrontierConfig
from crawlfleet.node.engine import EngineHooks
from crawlfleet.node.ledger import Ledger
from crawlfleet.node.lifecycle import Lifecycle
from crawlfleet.node.stats import NodeStats
from crawlfleet.node.steering import Steering

__all__ = ["NodeCore"]


@dataclass(frozen=True)
class NodeCore:
    """Node *node_id*'s parts, shared by its sync components. Frozen: a component may
    change what a part holds (the ledger's requests, the steering's state), never which
    part it is, so that every component sees the same ones."""

    #: the job's frontier (Redis, sharded, or in memory)
    frontier: FrontierBackend
    #: what the node holds: leased, handed to the engine, new, finished
    ledger: Ledger
    #: the node's wanted state and concurrency, as the operator set them
    steering: Steering
    #: whether the job is finished; closing the node once
    lifecycle: Lifecycle
    #: the job's typed settings
    config: FrontierConfig
    #: this node's id in the job (host-pid-random)
    node_id: str
    #: hooks into Scrapy's engine (no-ops until bound)
    engine: EngineHooks
    #: the node's stats (``crawlfleet/...``)
    stats: NodeStats
