"""When a node leases, and how much: the part of the sync loop that refills the ledger.

A node leases when its ready requests fall to half its prefetch, for what it lacks
(with plenty queued and no pacing, at a quarter of its configured prefetch, for all of
it, and with far more queued, for what it starts in the next seconds at its recent
pace, up to PLENTY_LEASE_FACTOR prefetches: fewer, larger rounds);
rate-limited sites get slots only for what its downloader can start on time. With
nothing to lease it looks again soon while other nodes hold work (their pages bring
links), and backs off up to CRAWLFLEET_IDLE_MAX_SECONDS when the job has none; when
only rate-limited sites wait, it comes back a few of their intervals after the first one
is ready (PACED_GATHER_SLOTS), for several slots at once.
While too many items wait for the item stores (:mod:`crawlfleet.node.backlog`) it
leases nothing.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable

from crawlfleet.exceptions import MalformedEntry
from crawlfleet.frontier.limits import LATE_SHARE, SENT_SHARE, Budgets, RateLimits
from crawlfleet.frontier.records import LeaseAsk, Leased, LeaseOptions, LeaseResult, printable
from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.node.backlog import Backlog
from crawlfleet.node.core import NodeCore
from crawlfleet.node.slots import RedisClock

__all__ = [
    "AHEAD_QUEUE_SHARE",
    "BUSY_POLL_MAX_SECONDS",
    "LEAD_EXTRA_SECONDS",
    "LEAD_KEPT",
    "LOW_SHARE_PLENTY",
    "MIN_IDLE_SECONDS",
    "PACED_GATHER_SECONDS",
    "PACED_GATHER_SLOTS",
    "PLENTY_HOLD_SECONDS",
    "PLENTY_LEASE_FACTOR",
    "SLOT_HORIZON_SECONDS",
    "Leaser",
]

logger = logging.getLogger(__name__)

#: Longest wait between lease attempts while other nodes hold leases.
BUSY_POLL_MAX_SECONDS = 0.2
#: First wait after a lease that found nothing.
MIN_IDLE_SECONDS = 0.05
#: Slots of rate-limited sites are leased at most this far ahead (a node that dies
#: holding them wastes at most this much of a budget).
SLOT_HORIZON_SECONDS = 0.5
#: A node whose sites are all rate-limited and not ready comes back PACED_GATHER_SLOTS
#: of the fastest one's intervals after the first is ready, at most PACED_GATHER_SECONDS,
#: not at that moment: nodes on one budget came back the moment its next slot was ready
#: and raced for it, a lease call that found nothing for each that got it (two a
#: request in all: their CPU, and Redis's). Less than the horizon, so the budget's next
#: slots are still leased well before their time; a few intervals, so that a fast
#: budget is not left unleased. (Leasing slots some at a time after every lease was
#: tried too: a node then holds runs of consecutive slots and misses more of them while
#: it parses the pages of the first.)
PACED_GATHER_SLOTS = 6
PACED_GATHER_SECONDS = SLOT_HORIZON_SECONDS / 4
#: A rate-limited site's first slot in a lease comes no sooner than the longest of the
#: last LEAD_KEPT leases' replies took to come back and be read (from when Redis ran
#: the script, on its clock as RedisClock places it), plus LEAD_EXTRA_SECONDS: with
#: Redis 50 ms away a reply is 25 ms on its way, and a slot granted for "now" reached
#: the node already missed. A budget that is in use lies ahead by more than that
#: anyway: the lead costs only the first slot after the budget was idle.
LEAD_KEPT = 16
LEAD_EXTRA_SECONDS = 0.002
#: While the job has plenty queued (see Leaser.plenty) and the node's work is not
#: paced, it leases once its ready requests fall to this fraction (1/LOW_SHARE_PLENTY) of
#: its configured prefetch, not half its current one.
LOW_SHARE_PLENTY = 4
#: While the node leases ahead (Leaser.ahead: its work not paced, the job with
#: AHEAD_QUEUE_SHARE times that much queued for every node), it keeps ready what it
#: starts in PLENTY_HOLD_SECONDS at its recent pace, at least its configured prefetch
#: and at most this many times it: a round of Redis work has a fixed cost of many
#: pages' worth, so rounds of three times the pages cost Redis about a third less a
#: page (docs/scaling.md); a node holds no more than it starts within seconds.
PLENTY_LEASE_FACTOR = 3
PLENTY_HOLD_SECONDS = 3.0
AHEAD_QUEUE_SHARE = 4


class Leaser:
    """Leases for the node of *core* into its ledger; ``budgets`` and ``robots_probe_ms`` are
    set by the node as they change."""

    def __init__(self, core: NodeCore, *, backlog: Backlog | None = None) -> None:
        self.core = core
        config = core.config
        #: items waiting for the item stores: past its bound, lease nothing
        self.backlog = backlog or Backlog(config.items_pending_max)
        self.codec = RequestCodec(None)
        self.budgets = Budgets(config.rate_limits, RateLimits({}), config.budget_scope, config.job)
        self.robots_probe_ms = 0
        #: the sites to lease from next (as the last lease proposed)
        self.offer: list[str] = []
        #: monotonic time before which the node does not lease (see next_at)
        self._next_at = 0.0
        #: no lease before this either, whatever asks for one (see quiet_until)
        self._quiet_until = 0.0
        #: the current wait after empty leases (0: the last lease found work)
        self.idle_delay = 0.0
        self._await_capacity = False
        #: requests queued in the job and its live nodes, as last read (-1: not yet)
        self.job_queued = -1
        self.live_nodes = 1
        #: Redis's clock against the event loop's, learned from the leases
        self.clock = RedisClock()
        #: how long the last leases' replies took from their script to being read (s)
        self._ways_back: deque[float] = deque(maxlen=LEAD_KEPT)
        #: the last lease that took requests brought slots of rate-limited sites
        self.paced = False
        #: a lease call is on its way (set by the sync loop around it)
        self.asking = False
        #: told the job's epoch each lease names, before it takes the lease's requests
        #: (the outbox: the node's seen cache must not outlive a reset of the job)
        self.epoch_seen: Callable[[str], None] | None = None
        #: requests the engine took a second between the last leases (0: not known yet)
        self.pace = 0.0
        #: event-loop time of the last lease that took requests, and the ready requests
        #: it left (to measure the pace by the next)
        self._leased_at: float | None = None
        self._ready_after = 0

    def low(self) -> bool:
        """Whether to lease now: the ready requests the node holds are at most half its
        prefetch; while the job has plenty queued and the node's work is not paced, at
        most a quarter of its configured prefetch (never while too many items wait for
        the item stores). With plenty queued a lease's round trip takes far less than
        that quarter lasts, and Redis's cost is largely per call: fewer, larger leases
        (see :meth:`wanted`). Paced work keeps the half, so that no slot comes late."""
        if self.backlog.over():
            return False
        ledger = self.core.ledger
        if self.plenty() and not self.pacing():
            return ledger.ready <= self.core.config.prefetch // LOW_SHARE_PLENTY
        return ledger.ready <= self.core.steering.prefetch // 2

    def pacing(self) -> bool:
        """The node's work is paced: its last lease that took requests brought slots of
        rate-limited sites, or it holds slotted requests."""
        return self.paced or bool(self.core.ledger.slotted)

    def leases_soon(self) -> bool:
        """The node leases as its work runs low: it runs, and its item stores do not
        hold it back. Only then may a commit wait for its next lease (see
        :meth:`~crawlfleet.node.outbox.Outbox.due`): acknowledgements that wait for a
        lease that is not coming are pages a kill would have fetched again."""
        return self.core.steering.state == "running" and not self.backlog.over()

    def plenty(self) -> bool:
        """The job has a configured prefetch queued for every live node, as last read:
        no node waits for new links, and one may lease ahead."""
        return self.job_queued >= self.core.config.prefetch * max(1, self.live_nodes)

    def ahead_target(self) -> int:
        """What the node holds ready while it leases ahead: what its engine starts in
        PLENTY_HOLD_SECONDS at its recent :attr:`pace`, at least its configured prefetch
        and at most PLENTY_LEASE_FACTOR times it."""
        prefetch = self.core.config.prefetch
        soon = round(self.pace * PLENTY_HOLD_SECONDS)
        return max(prefetch, min(PLENTY_LEASE_FACTOR * prefetch, soon))

    def ahead(self) -> bool:
        """Whether the node leases seconds of work at once (:meth:`ahead_target`, more
        than its configured prefetch): its work is not paced, and the job has
        AHEAD_QUEUE_SHARE times that queued for every live node, so that what it holds
        is done long before the queue runs out (the crawl's end waits on no node's
        hoard: near it, nodes hold their prefetch only)."""
        if self.pacing():
            return False
        target = self.ahead_target()
        needed = AHEAD_QUEUE_SHARE * target * max(1, self.live_nodes)
        return target > self.core.config.prefetch and self.job_queued >= needed

    def wanted(self) -> int:
        """How many requests to lease now: what the prefetch lacks; while the job has
        plenty, what the configured prefetch lacks even when feedback or an operator has
        cut the node's concurrency (a node crawling one request at a time would
        otherwise lease one at a time), and while it may lease :meth:`ahead`, what it
        starts in PLENTY_HOLD_SECONDS at its recent :attr:`pace` lacks, up to
        PLENTY_LEASE_FACTOR prefetches; 0 while too many items wait for the item
        stores."""
        if self.backlog.over():
            return 0
        want = self.core.steering.prefetch
        if self.plenty():
            want = max(want, self.core.config.prefetch)
            if self.ahead():
                want = max(want, self.ahead_target())
        return want - self.core.ledger.ready

    @property
    def next_at(self) -> float:
        """Monotonic time before which the node does not lease."""
        return max(self._next_at, self._quiet_until)

    @next_at.setter
    def next_at(self, when: float) -> None:
        self._next_at = when

    def quiet_until(self, when: float) -> None:
        """Lease nothing before monotonic time *when* (work arriving or not): the node
        is about to block its event loop until then (a large page's parse), and the
        slots a lease brought meanwhile would be missed; other nodes take them."""
        self._quiet_until = max(self._quiet_until, when)

    def now(self) -> None:
        """Lease at the next chance (work arrived, a pause ended, a site may be free)."""
        self.next_at = 0.0

    def work_arrived(self) -> None:
        """Requests were queued: lease at once, the idle back-off starts over."""
        self.idle_delay = 0.0
        self.next_at = 0.0

    def may_lease(self) -> bool:
        """Whether a lease now could get something (not while backing off from an empty
        job; once a download ends when the node waited for capacity)."""
        if self._await_capacity and len(self.core.ledger.handed) < self.core.steering.concurrency:
            self._await_capacity = False  # a download ended: slots can be used again
            self.next_at = 0.0
        return time.monotonic() >= self.next_at

    def ask(self) -> LeaseAsk | None:
        """The lease to ask for now along with a commit (a node's round in one call, see
        :meth:`~crawlfleet.frontier.base.Committer.commit_lease`); None when none is
        wanted, or no offer is known yet (then :meth:`lease` asks for one first)."""
        want = self.wanted()
        if want <= 0 or not self.offer:
            return None
        return self._ask(want, self.offer)

    def _ask(self, want: int, offer: list[str]) -> LeaseAsk:
        """A lease of *want* requests of the sites *offer*."""
        config, ledger, steering = self.core.config, self.core.ledger, self.core.steering
        # slots of rate-limited sites only for what the downloader can start on time
        free = steering.concurrency - len(ledger.handed) - len(ledger.slotted)
        paces = [self.budgets.pace(site) for site in offer]
        options: LeaseOptions = {
            "lease_ms": int(config.lease_seconds * 1000),
            "per_site": max(1, math.ceil(want / len(offer))),
            "offer_size": config.lease_sites,
            "intervals": [p.interval_us for p in paces],
            "budgets": [p.budget for p in paces],
            "late": [p.late_us for p in paces],
            "backoff_half_life_ms": int(config.backoff.half_life_seconds * 1000),
            "robots_probe_ms": self.robots_probe_ms,
            "horizon_us": int((SLOT_HORIZON_SECONDS + self.lead()) * 1_000_000),
            "late_share": config.rate_limit_margin * LATE_SHARE,
            "max_slots": max(0, free),
            "lead_us": int(self.lead() * 1_000_000),
        }
        return LeaseAsk(want, offer, options)

    def lead(self) -> float:
        """How far ahead of Redis's now a lease's first slot must lie to reach this
        node in time (s; see LEAD_KEPT): 0 before any lease came back."""
        if not self._ways_back:
            return 0.0
        return min(SLOT_HORIZON_SECONDS, max(self._ways_back) + LEAD_EXTRA_SECONDS)

    async def lease(self) -> int | None:
        """Lease what the node lacks; the job's control sequence as the lease read it
        (None: no lease was asked for)."""
        want = self.wanted()
        if want <= 0:
            return None
        offer = self.offer or await self.core.frontier.offer(self.core.config.lease_sites)
        asked = asyncio.get_event_loop().time()
        if not offer:
            return self.took(None, None, asked)
        ask = self._ask(want, offer)
        result = await self.core.frontier.lease(self.core.node_id, ask.n, ask.sites, **ask.options)
        return self.took(ask, result, asked)

    def took(self, ask: LeaseAsk | None, result: LeaseResult | None, asked: float) -> int | None:
        """Take in *result*, the reply to *ask* (None, None: there was no site to lease
        from) sent at event-loop time *asked*: the job's control sequence it read (None:
        no lease was made)."""
        received = asyncio.get_event_loop().time()
        offsets: dict[str, tuple[int, float]] = {}
        if result is not None:
            offsets = self._learn_clocks(result, asked, received)
            if self.epoch_seen is not None:
                self.epoch_seen(result.epoch)  # before its requests reach the engine
            self.offer = result.offer
            self.job_queued = result.queued
            for site in result.backoff_ended:
                logger.info("Back-off of %s is over (it decayed)", site)
        free = ask.options.get("max_slots") if ask is not None else None
        if result is not None and not result.entries and result.ready_in_us >= 0:
            # rate-limited sites only: come back once the first one is ready, and a few
            # slots later, for several in one call
            # (no interval at all: every site asked is backed off, which paces by time
            # alone, not by slots)
            intervals = [i for i in (ask.options.get("intervals") or ()) if i > 0] if ask else []
            gather = 0.0
            if intervals:
                gather = min(PACED_GATHER_SECONDS, PACED_GATHER_SLOTS * min(intervals) / 1e6)
            wait = result.ready_in_us / 1_000_000 + gather
            self.next_at = time.monotonic() + wait
            return result.control_seq
        if result is not None and not result.entries and free is not None and free <= 0:
            # no capacity for slots: lease again once a download ends (may_lease)
            self._await_capacity = True
            self.next_at = time.monotonic() + BUSY_POLL_MAX_SECONDS
            return result.control_seq
        if result is None or not result.entries:
            # Nothing to lease. While other nodes hold leases, their pages will bring
            # new links soon: look again within BUSY_POLL_MAX_SECONDS. Only a job with
            # nothing leased backs off up to CRAWLFLEET_IDLE_MAX_SECONDS.
            busy = result is not None and (result.leased > 0 or result.queued > 0)
            cap = BUSY_POLL_MAX_SECONDS if busy else self.core.config.idle_max_seconds
            self.idle_delay = min(max(self.idle_delay * 2, MIN_IDLE_SECONDS), cap)
            self.next_at = time.monotonic() + self.idle_delay
            return None if result is None else result.control_seq
        self.idle_delay = 0.0
        self.paced = any(entry.slot_us is not None for entry in result.entries)
        self._measure_pace(received)
        self._take(result, offsets)
        self._leased_at, self._ready_after = received, self.core.ledger.ready
        return result.control_seq

    def _measure_pace(self, now: float) -> None:
        """The requests the engine took from the ready ones since the last lease that
        took requests, a second (averaged with the pace before): what a lease must
        hold for the node's next seconds."""
        if self._leased_at is None or now <= self._leased_at:
            return
        taken = self._ready_after - self.core.ledger.ready
        if taken < 0:
            return  # more ready than the last lease left: not a measure of the engine
        rate = taken / (now - self._leased_at)
        self.pace = rate if self.pace <= 0 else (self.pace + rate) / 2

    def _learn_clocks(
        self, result: LeaseResult, asked: float, received: float
    ) -> dict[str, tuple[int, float]]:
        """Where each clock of *result* (asked at *asked*, read at *received*) stands
        against the event loop's: clock -> (Redis's time at the lease (µs), the offset
        (s), see RedisClock); and how long its reply took to come back (for lead)."""
        offsets: dict[str, tuple[int, float]] = {}
        # a lease over several shards names each one's clock (its now_us is theirs mixed)
        for clock, redis_us in (result.clocks or {"": result.now_us}).items():
            offset = self.clock.offset(clock, redis_us, asked, received)[0]
            offsets[clock] = (redis_us, offset)
            ran = redis_us / 1_000_000 - offset  # when the script ran, on our clock
            self._ways_back.append(max(0.0, received - ran))
        return offsets

    def _take(self, result: LeaseResult, offsets: dict[str, tuple[int, float]]) -> None:
        ledger = self.core.ledger
        for entry in result.entries:
            ledger.hold(entry.rid, entry.site)
            try:
                if entry.fault:
                    raise MalformedEntry(entry.fault)
                request = self.codec.decode(entry.payload)
            except MalformedEntry as exc:
                self._set_aside(entry, str(exc))
                continue
            if entry.slot_us is None:
                ledger.add_ready(request, entry.rid)
            else:
                # Redis's "now" lies between asking and the reply: where its clock stands
                # against ours is known as closely as the quickest lease lately told it,
                # and taken at the middle of that (RedisClock)
                redis_us, offset = offsets[entry.clock]
                at = (redis_us + entry.slot_us) / 1_000_000 - offset
                late = entry.late_us / 1_000_000
                # the margin a slot has (late is LATE_SHARE of it), SENT_SHARE of it to
                # pass the downloader middlewares
                sent_by = at + late / LATE_SHARE * SENT_SHARE
                ledger.add_slotted(at, late, request, entry.rid, sent_by)
                if self.robots_probe_ms:
                    # robots.txt read before the slot, not between the slot and the wire
                    self.core.engine.warm_robots(request)
        self.core.stats.inc("crawlfleet/frontier/leased", len(result.entries))
        self.core.engine.wake()

    def _set_aside(self, entry: Leased, fault: str) -> None:
        """Log *entry* (a lease whose entry is not a request: *fault*) and have it set
        aside in the job's list of malformed entries with the next commit."""
        logger.error(
            "Malformed frontier entry %s in %s set aside (job %s): %s",
            entry.rid,
            entry.where or "the frontier",
            self.core.config.job,
            printable(fault),
        )
        self.core.stats.inc("crawlfleet/frontier/malformed")
        self.core.ledger.set_aside(entry.rid)
