"""A node's registration in its job: heartbeats, and the upkeep of the job's leases.

The sync loop (:mod:`crawlfleet.node.sync`) calls :meth:`Heartbeat.due` each round;
its contract:

- Every CRAWLFLEET_HEARTBEAT_SECONDS (every IDLE_HEARTBEAT_SECONDS at most while the
  job may be ending: the node is idle and closes when the job is finished, and the job
  has nothing queued, as the last heartbeat or lease read it, and nothing waiting for
  its time (a retry, a tracked page between visits), as the last heartbeat read it, so
  that it sees the end soon; at once when it just ran out of work, or its status
  changed) the node renews its registration (it lapses after
  CRAWLFLEET_NODE_TIMEOUT_SECONDS without one), publishes its status
  (``<job>:nodeinfo``), and reads the job's state: its counts go to the leaser, its
  limits and commands to :class:`~crawlfleet.node.control.Control`, whether it is
  finished to the :class:`~crawlfleet.node.lifecycle.Lifecycle`. The heartbeats that
  come RENEW_SHARE of CRAWLFLEET_LEASE_SECONDS or more after the last renewal that got
  through (less a heartbeat period, so that the gap never exceeds it) renew every lease
  the node holds too: most requests are acknowledged long before their lease could
  lapse, and renewing them at every heartbeat cost Redis two commands a lease held.
- Between heartbeats, at least every CONTROL_CHECK_SECONDS, it reads the job's command
  sequence (a lease reads it too): a new command brings the next heartbeat forward, so
  that a pause holds within a second.
- Every CRAWLFLEET_RECLAIM_SECONDS, and when each request it queued with a delay (a
  retry's back-off, a tracked page's next visit) comes due, it returns the expired
  leases of any node (a dead one's among them) to their queues. It keeps every such due
  time (to DUE_GRAIN_SECONDS) within DUE_HORIZON_RECLAIMS reclaim periods, not only the
  next one: a page due just after another is not left waiting for the next periodic
  reclaim. One due later is at most a reclaim period late, a small part of its wait.
- At close: :meth:`Heartbeat.beat` with ``leaving`` says so (no command is taken any
  more), and :meth:`Heartbeat.keep_alive` renews the registration and leases alone.

Every call raises Redis's errors (but :meth:`keep_alive`): the loop waits them out.
"""

from __future__ import annotations

import heapq
import json
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from crawlfleet.frontier.records import JobState
from crawlfleet.node.control import Control
from crawlfleet.node.core import NodeCore
from crawlfleet.node.leasing import Leaser
from crawlfleet.node.seeds import SeedReader
from crawlfleet.redis.connection import REDIS_ERRORS, redact

__all__ = [
    "CONTROL_CHECK_SECONDS",
    "DUE_GRAIN_SECONDS",
    "DUE_HORIZON_RECLAIMS",
    "IDLE_HEARTBEAT_SECONDS",
    "RENEW_SHARE",
    "Heartbeat",
]

logger = logging.getLogger(__name__)

#: A node renews its leases at least this often, as a share of CRAWLFLEET_LEASE_SECONDS
#: (a lease is renewed with two thirds of its time still left at the least).
RENEW_SHARE = 1 / 3

#: Heartbeat period of a node with nothing to do in a job that may be ending (nothing
#: queued), so that it sees the job finish soon. Not while requests are queued: a node
#: idle then waits for its sites' slots, and beating ten times a second would cost it
#: (and Redis) a heartbeat and a status a tenth of a second for nothing.
IDLE_HEARTBEAT_SECONDS = 0.1
#: The frequent beats of an idle node (IDLE_HEARTBEAT_SECONDS) are for reading the job's
#: state: they publish the node's status again as it was built, when it is this recent
#: (building it is most of a beat's cost; a status is read about once a second).
STATUS_REUSE_SECONDS = 1.0
#: A node looks for new control commands at least this often (pause within a second).
CONTROL_CHECK_SECONDS = 0.5
#: Due times of delayed requests closer than this are reclaimed together.
DUE_GRAIN_SECONDS = 0.05
#: Due times further than this many CRAWLFLEET_RECLAIM_SECONDS ahead are not kept (the
#: periodic reclaim is soon enough for them); bounds what a node keeps (10 000 times at
#: the default 5 s).
DUE_HORIZON_RECLAIMS = 100


class Heartbeat:
    """Keeps the node of *core* registered in its job (see the module docstring).

    *status*: what the node publishes; *idle*: whether it holds nothing and the engine
    reads no start requests; *feeding*: whether requests fed from outside the engine
    wait to be sent (the job is not finished for this node meanwhile)."""

    def __init__(
        self,
        core: NodeCore,
        *,
        leaser: Leaser,
        control: Control,
        seeds: SeedReader | None,
        status: Callable[[], dict[str, Any]],
        idle: Callable[[], bool],
        feeding: Callable[[], bool],
    ) -> None:
        self.core = core
        self.leaser = leaser
        self.control = control
        self.seeds = seeds
        self.status = status
        self.idle = idle
        self.feeding = feeding
        #: the job's state as the last heartbeat read it (None: none yet)
        self.state: JobState | None = None
        self._next_beat = 0.0
        self._last_beat = -math.inf
        self._status = ""  # the status last published, and when it was built (monotonic)
        self._status_at = -math.inf
        self._next_reclaim = 0.0
        #: due times (in DUE_GRAIN_SECONDS, monotonic) of delayed requests still to
        #: reclaim: a heap, and the same as a set
        self._due: list[int] = []
        self._due_set: set[int] = set()
        self._was_idle = False  # at the last heartbeat
        #: monotonic time the last heartbeat that renewed the leases was sent
        self._renewed_at = -math.inf
        self._control_seq = -1  # the job's newest command known (-1: not read yet)
        self._next_control_check = 0.0

    def now(self) -> None:
        """Beat at the next round (the node's status changed)."""
        self._next_beat = 0.0

    def reclaim_by(self, when: float) -> None:
        """Reclaim expired leases at monotonic time *when* (a delayed request comes due
        then), besides every other time asked for and the periodic reclaims."""
        horizon = DUE_HORIZON_RECLAIMS * self.core.config.reclaim_seconds
        if when - time.monotonic() > horizon:
            return
        grain = math.ceil(when / DUE_GRAIN_SECONDS)
        if grain not in self._due_set:
            self._due_set.add(grain)
            heapq.heappush(self._due, grain)
        self._next_reclaim = min(self._next_reclaim, grain * DUE_GRAIN_SECONDS)

    def watch_idle(self) -> None:
        """The node just ran out of work: say so at the next beat, at once (the job may
        be finished)."""
        if not self._was_idle and self.idle():
            self._next_beat = 0.0

    async def due(self, now: float) -> None:
        """What is due at monotonic time *now*: a look at the command sequence, a
        heartbeat, a reclaim of expired leases."""
        if now >= self._next_beat:
            await self.beat()
        elif now >= self._last_beat + IDLE_HEARTBEAT_SECONDS and self._may_be_ending():
            await self.beat(fresh=now >= self._status_at + STATUS_REUSE_SECONDS)
        elif now >= self._next_control_check:
            self.note_control_seq(await self.core.frontier.control_seq())
        if now >= self._next_reclaim:
            await self._reclaim(now)

    def note_control_seq(self, seq: int) -> None:
        """The job's command sequence as just read: a new command is read (with a
        heartbeat) at once."""
        self._next_control_check = time.monotonic() + CONTROL_CHECK_SECONDS
        if seq != self._control_seq:
            if self._control_seq >= 0:
                self._next_beat = 0.0
            self._control_seq = seq

    async def beat(self, *, leaving: bool = False, fresh: bool = True) -> None:
        """Renew the registration and leases, publish the status (``"leaving"`` when
        *leaving*; the last one built again unless *fresh*), take in the job's state."""
        idle = self.idle()
        if leaving:
            status = "leaving"
        else:
            if fresh or not self._status:
                self._status = json.dumps(self.status(), default=str)
                self._status_at = time.monotonic()
            status = self._status
        config = self.core.config
        sent = time.monotonic()
        period = config.lease_seconds * RENEW_SHARE - config.heartbeat_seconds
        renewing = sent - self._renewed_at >= period
        state = await self.core.frontier.heartbeat(
            self.core.node_id,
            ttl_ms=int(config.node_timeout_seconds * 1000),
            status=status,
            busy=not idle,
            lease_ms=int(config.lease_seconds * 1000),
            renew=self.core.ledger.kept() if renewing else [],
        )
        if renewing:
            self._renewed_at = sent
        self.state = state
        self.leaser.job_queued, self.leaser.live_nodes = state.queued, state.live_nodes
        self.count_cache()
        if not leaving:
            await self.control.take(state)
        now = time.monotonic()
        self._last_beat = now
        self._next_beat = now + self.core.config.heartbeat_seconds
        self._was_idle = idle
        if state.queued > 0 and not self.core.ledger.ready:
            self.leaser.now()
        seeds = self.seeds
        waiting = bool(self.core.lifecycle.holds) or self.feeding()
        waiting = waiting or (seeds is not None and seeds.waiting)
        read_at = seeds.read_at if seeds is not None else math.inf
        self.core.lifecycle.update(state, idle, waiting, now, read_at)
        since = self.core.lifecycle.empty_since
        if seeds is not None and since is not None and read_at < since:
            # the job looks finished: read the seed key once more first (seeds pushed
            # since the last read must not be left behind)
            seeds.next_at = 0.0

    def _may_be_ending(self) -> bool:
        """The node is idle, closes when the job is finished, and the job has nothing
        queued (as the last heartbeat or lease read it; before its first seed too, which
        a heartbeat brings at once) and nothing waiting for its time (a retry backing
        off, a tracked request between visits: the job cannot finish before it is
        crawled, maybe hours from now): beat often."""
        waiting = self.state is not None and self.state.waiting > 0
        return (
            self.core.config.close_when_finished
            and self.leaser.job_queued <= 0
            and not waiting
            and self.idle()
        )

    async def keep_alive(self) -> None:
        """A heartbeat that renews the registration and leases and nothing else (at
        close, the loop stopped). A failure is logged at DEBUG and ignored: the close
        goes on, and the leases may lapse (their pages are crawled again)."""
        try:
            await self.core.frontier.heartbeat(
                self.core.node_id,
                ttl_ms=int(self.core.config.node_timeout_seconds * 1000),
                status=json.dumps(self.status(), default=str),
                busy=True,
                lease_ms=int(self.core.config.lease_seconds * 1000),
                renew=self.core.ledger.kept(),
            )
        except REDIS_ERRORS as exc:  # one try: the close does not wait for Redis here
            logger.debug("Heartbeat while closing failed: %s", redact(str(exc)))

    async def _reclaim(self, now: float) -> None:
        pending = self._due
        while pending and pending[0] * DUE_GRAIN_SECONDS <= now:
            self._due_set.discard(heapq.heappop(pending))
        self._next_reclaim = now + self.core.config.reclaim_seconds
        if pending:
            self._next_reclaim = min(self._next_reclaim, pending[0] * DUE_GRAIN_SECONDS)
        back = await self.core.frontier.reclaim_expired(
            grace_ms=int(self.core.config.node_timeout_seconds * 1000)
        )
        due, self.core.frontier.came_due = self.core.frontier.came_due, 0
        if back:
            logger.info(
                "Returned %d leases (expired, or held by a dead node) to their queues", back
            )
            self.core.stats.inc("crawlfleet/frontier/reclaimed", back)
        if due:
            self.core.stats.inc("crawlfleet/frontier/retries_due", due)
        if back or due:
            self.leaser.work_arrived()

    def count_cache(self) -> None:
        """The seen cache's figures into the node's stats."""
        seen = self.core.ledger.seen
        self.core.stats.set("crawlfleet/seen_cache/lookups", seen.lookups)
        self.core.stats.set("crawlfleet/seen_cache/hits", seen.hits)
        self.core.stats.set("crawlfleet/seen_cache/size", len(seen))
