"""A node leaving its job at close: everything handed back or in, bounded in time.

Once the sync loop has stopped, :meth:`Leaving.leave`, in order:

1. acknowledges the requests the engine finished;
2. waits, up to CLOSE_RECORD_SECONDS, for the requests whose final failure is on its
   way to the error registry (see :mod:`crawlfleet.node.ledger`; the registry's writer
   is asked to write at once, and the node's leases are kept alive meanwhile): those
   recorded by then are acknowledged, the others given back to their queues (crawled
   again later), never acknowledged with their failure unwritten;
3. gives back what the engine did not finish (a forced stop), saying how many pages go
   back because their items could not be stored;
4. sends the new requests and acknowledgements still unsent, releases the leases given
   back and those held, keeps the node's summary (``job status``), then says "leaving"
   in a last heartbeat (whoever sees it leave finds its summary). While Redis is
   unreachable this is tried again with back-off, up to CLOSE_FLUSH_SECONDS
   (:func:`~crawlfleet.outage.until_reachable`); then one ERROR says what was not handed
   back: the leases return to their queues when they expire.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from crawlfleet.node.core import NodeCore
from crawlfleet.node.heartbeat import Heartbeat
from crawlfleet.node.outbox import Outbox
from crawlfleet.outage import Backoff, GaveUp, until_reachable

__all__ = ["CLOSE_FLUSH_SECONDS", "CLOSE_RECORD_SECONDS", "Leaving"]

logger = logging.getLogger(__name__)

#: How long close() keeps trying to hand its last batch to an unreachable Redis.
CLOSE_FLUSH_SECONDS = 60.0
#: How long close() waits for failures on their way to the error registry (the
#: registry's writer tries a state DB that does not answer again every 5 s).
CLOSE_RECORD_SECONDS = 10.0
#: How often the wait for failure records looks at them.
RECORD_POLL_SECONDS = 0.05


class Leaving:
    """Takes the node of *core* out of its job at close (see the module docstring)."""

    def __init__(
        self,
        core: NodeCore,
        *,
        outbox: Outbox,
        heartbeat: Heartbeat,
        backoff: Backoff,
    ) -> None:
        self.core = core
        self.outbox = outbox
        self.heartbeat = heartbeat
        self.backoff = backoff
        #: makes the error registry's writer write at once (set by the registry)
        self.flush_records: Callable[[], None] = lambda: None

    async def leave(self, reason: str, summary: Callable[[str], dict[str, Any]]) -> None:
        """Hand everything back or in, leave the registry, keep the node's *summary* of
        its run (with the close *reason*)."""
        self.outbox.collect_finished()
        await self._await_records()
        ledger = self.core.ledger
        ledger.abandon_handed()
        unstored = self.core.stats.get("crawlfleet/frontier/unstored")
        if unstored:
            logger.warning(
                "%d pages whose items could not be stored before the stop go back to the "
                "frontier (crawled again later)",
                unstored,
            )
        self.backoff.reset()
        try:
            await until_reachable(
                "hand its work back and leave the job",
                lambda: self._hand_back(reason, summary),
                self.backoff,
                give_up_after=CLOSE_FLUSH_SECONDS,
            )
        except GaveUp:
            logger.error(
                "Could not reach Redis for %.0fs while closing: %d new requests were not "
                "queued; %d leases will return to their queues when they expire",
                CLOSE_FLUSH_SECONDS,
                len(ledger.out),
                len(ledger.held),
            )
            self.core.stats.set("crawlfleet/node/unfinished", len(ledger.out) + len(ledger.held))
        self.core.stats.set("crawlfleet/redis/round_trips", self.core.frontier.round_trips)
        self.heartbeat.count_cache()

    async def _hand_back(self, reason: str, summary: Callable[[str], dict[str, Any]]) -> None:
        """One try at what close sends; what was done stays done when it fails."""
        ledger = self.core.ledger
        while ledger.unsent:
            await self.outbox.flush()
        await self.outbox.release_given_back()
        held = list(ledger.held.items())
        if held:
            back = await self.core.frontier.release(self.core.node_id, held)
            self.core.stats.inc("crawlfleet/frontier/released", back)
        ledger.held.clear()
        ledger.buffer.clear()
        # the summary first: whoever sees the node leave (the manager closing its run)
        # finds its summary there
        await self.core.frontier.save_summary(self.core.node_id, summary(reason))
        await self.heartbeat.beat(leaving=True)

    async def _await_records(self) -> None:
        """Wait (up to CLOSE_RECORD_SECONDS) for the failures of finished requests to be
        recorded; give back the requests whose failures are not."""
        ledger = self.core.ledger
        if not ledger.recorded:
            return
        logger.info(
            "Waiting up to %.0fs for %d failure(s) to be written to the error registry",
            CLOSE_RECORD_SECONDS,
            len(ledger.recorded),
        )
        self.flush_records()
        now = time.monotonic()
        deadline, beat = now + CLOSE_RECORD_SECONDS, now + self.core.config.heartbeat_seconds
        while ledger.recorded and (now := time.monotonic()) < deadline:
            if now >= beat:  # the loop is stopped: keep the node and its leases alive
                beat = now + self.core.config.heartbeat_seconds
                await self.heartbeat.keep_alive()
            await asyncio.sleep(RECORD_POLL_SECONDS)
        given = ledger.give_back_recorded()
        if given:
            logger.warning(
                "%d requests whose failures could not be written to the error registry "
                "before the stop go back to the frontier (crawled again later)",
                given,
            )
            self.core.stats.inc("crawlfleet/errors/unwritten", given)
