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
from crawlfleet.frontier.control import Desired
from crawlfleet.frontier.limits import Budgets, RateLimits
from crawlfleet.frontier.records import JobState
from crawlfleet.node.core import NodeCore
from crawlfleet.node.leasing import Leaser

__all__ = ["Control"]

logger = logging.getLogger(__name__)


class Control:
    """Applies the job's limits and commands to the node of *core* (see the module
    docstring); *concurrency_changed* is called when the steering's concurrency did."""

    def __init__(
        self,
        core: NodeCore,
        *,
        leaser: Leaser,
        concurrency_changed: Callable[[], None],
    ) -> None:
        self.core = core
        self.leaser = leaser
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
        margin = self.core.config.rate_limit_margin
        self.leaser.budgets = Budgets(
            self.core.config.rate_limits.merged(_valid_limits(fleet, "the fleet's", margin)),
            _valid_limits(own, f"job {self.core.config.job!r}'s own", margin),
            self.core.config.budget_scope,
            self.core.config.job,
        )
        logger.info(
            "Rate limits now: fleet %s, own (job %s) %s",
            fleet or "as configured",
            self.core.config.job,
            own or "none",
        )

    async def _apply(self, wanted: Desired) -> None:
        before = self.core.steering.state
        resized, state = self.core.steering.take(wanted)
        if resized:
            logger.info("Control: concurrency ceiling now %d", self.core.steering.ceiling)
            self.concurrency_changed()
        if state is None:
            return
        lift = f" (`crawlfleet control resume {self.core.config.job}` lifts it)"
        if "campaign" in self.core.lifecycle.holds:  # a campaign's pause: resume the campaign
            lift = " (`crawlfleet campaign resume NAME` lifts it)"
        logger.info(
            "Control: node %s %s -> %s%s",
            self.core.node_id,
            before,
            state,
            "" if state == "running" else lift,
        )
        if state in ("paused", "stopped"):
            held = self.core.ledger.drain_ready()
            if held:
                back = await self.core.frontier.release(self.core.node_id, held)
                self.core.stats.inc("crawlfleet/frontier/released", back)
        if state == "stopped":
            self.core.lifecycle.close_once("stopped")
        elif state == "running":
            self.leaser.now()
            self.core.engine.wake()


def _valid_limits(raw: dict[str, str], whose: str, margin: float) -> RateLimits:
    """The run-time limits *raw* that parse; each bad one is logged and skipped."""

    def skipped(pattern: str, spec: str, exc: ConfigError) -> None:
        logger.error("Ignoring %s rate limit %r = %r: %s", whose, pattern, spec, exc)

    return RateLimits.lenient(raw, margin=margin, skipped=skipped)
