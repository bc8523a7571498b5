"""The operator's word as a node takes it: run-time rate limits and control commands.

Each heartbeat reads the job's run-time limits and its wanted state and concurrency
(``crawlfleet limits``, ``crawlfleet control``, the manager); :meth:`Control.take`
applies what changed:

- limits: the leaser's budgets become the fleet's run-time limits over the configured
  ones (budgets every job shares), and the job's own; a limit that does not parse is
  logged and skipped, the others hold;
- a new concurrency ceiling resizes the downloader (``concurrency_changed``);
- ``paused`` and ``stopped`` give back the requests the node holds ready; ``stopped``
  closes the node; ``running`` again leases and wakes the engine at once. (``draining``
  closes the node once it holds nothing: the sync loop sees to that.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from crawlfleet.exceptions import ConfigError
from crawlfleet.frontier.base import FrontierBackend
from crawlfleet.frontier.config import FrontierConfig
from crawlfleet.frontier.control import Desired
from crawlfleet.frontier.limits import Budgets, RateLimits
from crawlfleet.frontier.records import JobState
from crawlfleet.node.engine import EngineHooks
from crawlfleet.node.leasing import Leaser
from crawlfleet.node.ledger import Ledger
from crawlfleet.node.lifecycle import Lifecycle
from crawlfleet.node.stats import NodeStats
from crawlfleet.node.steering import Steering

__all__ = ["Control"]

logger = logging.getLogger(__name__)


class Control:
    """Applies the job's limits and commands to node *node_id* (see the module
    docstring); *concurrency_changed* is called when the steering's concurrency did."""

    def __init__(
        self,
        *,
        frontier: FrontierBackend,
        ledger: Ledger,
        steering: Steering,
        lifecycle: Lifecycle,
        leaser: Leaser,
        config: FrontierConfig,
        node_id: str,
        engine: EngineHooks,
        stats: NodeStats,
        concurrency_changed: Callable[[], None],
    ) -> None:
        self.frontier = frontier
        self.ledger = ledger
        self.steering = steering
        self.lifecycle = lifecycle
        self.leaser = leaser
        self.config = config
        self.node_id = node_id
        self.engine = engine
        self.stats = stats
        self.concurrency_changed = concurrency_changed
        self._limits_raw: tuple[dict[str, str], dict[str, str]] = ({}, {})

    async def take(self, state: JobState) -> None:
        """Apply the limits and commands of *state*, as a heartbeat read it."""
        self._refresh_limits(state.limits, state.fleet_limits)
        await self._apply(state.control)

    def _refresh_limits(self, own: dict[str, str], fleet: dict[str, str]) -> None:
        """Take the run-time limits read with the heartbeat: the fleet's over the
        configured ones (budgets every job shares), and the job's own."""
        if (own, fleet) == self._limits_raw:
            return
        self._limits_raw = (own, fleet)
        margin = self.config.rate_limit_margin
        self.leaser.budgets = Budgets(
            self.config.rate_limits.merged(_valid_limits(fleet, "the fleet's", margin)),
            _valid_limits(own, f"job {self.config.job!r}'s own", margin),
            self.config.budget_scope,
            self.config.job,
        )
        logger.info(
            "Rate limits now: fleet %s, own (job %s) %s",
            fleet or "as configured",
            self.config.job,
            own or "none",
        )

    async def _apply(self, wanted: Desired) -> None:
        before = self.steering.state
        resized, state = self.steering.take(wanted)
        if resized:
            logger.info("Control: concurrency ceiling now %d", self.steering.ceiling)
            self.concurrency_changed()
        if state is None:
            return
        lift = f" (`crawlfleet control resume {self.config.job}` lifts it)"
        if "campaign" in self.lifecycle.holds:  # a campaign's pause: resume the campaign
            lift = " (`crawlfleet campaign resume NAME` lifts it)"
        logger.info(
            "Control: node %s %s -> %s%s",
            self.node_id,
            before,
            state,
            "" if state == "running" else lift,
        )
        if state in ("paused", "stopped"):
            held = self.ledger.drain_ready()
            if held:
                back = await self.frontier.release(self.node_id, held)
                self.stats.inc("crawlfleet/frontier/released", back)
        if state == "stopped":
            self.lifecycle.close_once("stopped")
        elif state == "running":
            self.leaser.now()
            self.engine.wake()


def _valid_limits(raw: dict[str, str], whose: str, margin: float) -> RateLimits:
    """The run-time limits *raw* that parse; each bad one is logged and skipped."""

    def skipped(pattern: str, spec: str, exc: ConfigError) -> None:
        logger.error("Ignoring %s rate limit %r = %r: %s", whose, pattern, spec, exc)

    return RateLimits.lenient(raw, margin=margin, skipped=skipped)
