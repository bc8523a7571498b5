"""Building a node's :class:`~crawlfleet.node.core.NodeCore` for tests that drive one of
its components directly (no scheduler, no engine)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from crawlfleet.frontier.base import FrontierBackend
from crawlfleet.frontier.config import FrontierConfig
from crawlfleet.node.core import NodeCore
from crawlfleet.node.engine import EngineHooks
from crawlfleet.node.ledger import Ledger
from crawlfleet.node.lifecycle import Lifecycle
from crawlfleet.node.stats import NodeStats
from crawlfleet.node.steering import Steering
from crawlfleet.settings.config import settings_with_defaults

__all__ = ["node_core"]


def node_core(
    frontier: FrontierBackend,
    node_id: str = "n",
    settings: dict[str, Any] | None = None,
    **config: Any,
) -> NodeCore:
    """The core of node *node_id* of job "job" on *frontier*: its config from *settings*
    (with the defaults) and then the FrontierConfig fields in *config*; engine hooks
    that do nothing, stats kept nowhere."""
    frontier_config = FrontierConfig.from_settings(settings_with_defaults(settings or {}), "job")
    if config:
        frontier_config = replace(frontier_config, **config)
    engine = EngineHooks()
    return NodeCore(
        frontier=frontier,
        ledger=Ledger(lambda: None, seen_cache_size=frontier_config.seen_cache_size),
        steering=Steering(16, frontier_config.prefetch),
        lifecycle=Lifecycle(frontier_config, engine, node_id),
        config=frontier_config,
        node_id=node_id,
        engine=engine,
        stats=NodeStats(None),
    )
