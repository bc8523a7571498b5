"""A node's local ledger of requests: every request it holds, and in which state.

Pure bookkeeping on the event loop, no I/O: the scheduler adds to it, the sync loop
(:mod:`crawlfleet.node.sync`: its outbox, leaser and heartbeat) sends what it collects
to the frontier and records what the frontier hands out. A request is in exactly one place:

- ``out``: new requests (fingerprint, payload) waiting for the next commit batch;
  ``known``: new requests dropped as duplicates because the node's seen cache knew
  their fingerprint, until the next commit confirms that the job was not reset since
  (else they are sent after all);
- ``buffer``: leased, ready for the engine; ``slotted``: leased requests of
  rate-limited sites, each waiting for its send time;
- ``handed``: given to the engine, not finished (``send_by``: the window in which a
  slotted one must go out, else it goes back: see
  :mod:`crawlfleet.middlewares.sendtime`);
- ``recorded``: finished, but a final failure of theirs is still on its way to the
  error registry: held (leased, renewed) until it is durable;
- ``acks``: finished, to acknowledge; ``revisits`` and ``untracked``: finished
  requests of tracked pages (continuous crawls, :mod:`crawlfleet.node.revisits`: the
  ledger's ``keeper``, None when revisits are off), kept for their next visit or
  acknowledged for good; ``release``: leases to give back (pages whose item a store
  gave up, slots missed, failures the registry could not write); ``bad``: malformed
  entries to set aside.

``held`` maps every lease this node holds (rid -> site) until its request is finished
or given back; heartbeats renew :meth:`Ledger.kept`: these, and the finished ones whose
acknowledgement has not left yet (with plenty of links to send, it waits behind them:
a lease not renewed meanwhile lapsed under a live node, and its page was fetched
again).

A request whose final failure is being recorded (:meth:`Ledger.recording`, called by
the error registry as it queues the record) is acknowledged only once the registry's
writer has settled the record (:meth:`Ledger.record_settled`): written (or refused for
good by the state DB, which the writer logs), then acknowledged; not written (the writer
stopped, or had too many waiting), then given back to its queue, to be crawled again.
Until then it stays held, so a node killed meanwhile loses nothing: its lease returns to
the queue and another node fetches the page again. Requests without a failure pay
nothing for this.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection

from scrapy import Request

from crawlfleet.frontier.records import Revisit, Untrack
from crawlfleet.node.seencache import SeenCache
from crawlfleet.node.slots import SlotQueue
from crawlfleet.parts import SendWindow

__all__ = ["Keeper", "Ledger", "Outbound"]

#: A new request on its way to the frontier: (request, fingerprint, payload, delay in
#: ms before it may be queued: a retry's back-off, 0: none).
Outbound = tuple[Request, bytes, bytes, int]
#: What becomes of the lease (rid) of a finished request: kept for a revisit, untracked,
#: or None (acknowledged).
Keeper = Callable[[Request, str], Revisit | Untrack | None]


class Ledger:
    """The requests of one node; *slot_due* is called when a slotted request's time
    comes (the engine should ask for it), *on_done* with the site of each request that
    finished (to acknowledge); *seen_cache_size*: fingerprints of the seen cache."""

    def __init__(
        self,
        slot_due: Callable[[], None],
        on_done: Callable[[str], None] = lambda site: None,
        seen_cache_size: int = 200_000,
    ) -> None:
        self.on_done = on_done
        self.out: list[Outbound] = []
        #: fingerprints the job's seen-filter holds (or will, with the batch on its way)
        self.seen = SeenCache(seen_cache_size)
        self.known: list[Request] = []
        #: ids of the requests in ``known`` that were dropped where the spider yielded
        #: them (see known_duplicate)
        self.known_early: set[int] = set()
        self.buffer: deque[tuple[Request, str]] = deque()
        self.slotted: SlotQueue[tuple[Request, str]] = SlotQueue(slot_due)
        self.handed: dict[Request, str] = {}
        #: slotted requests (waiting or handed): their slot, and the loop time by which
        #: each must have passed the downloader middlewares
        self.send_by: dict[Request, SendWindow] = {}
        self.unstored: set[Request] = set()
        #: requests (handed or finished) -> failure records not yet settled
        self.records: dict[Request, int] = {}
        #: requests one of whose failure records could not be written: to release
        self.unrecorded: set[Request] = set()
        #: finished requests held until their failure records are settled -> rid
        self.recorded: dict[Request, str] = {}
        self.acks: list[str] = []
        #: finished requests of tracked pages: kept for their next visit, or untracked
        self.revisits: list[Revisit] = []
        self.untracked: list[Untrack] = []
        #: what becomes of a finished request's lease (None: acknowledged; revisits off)
        self.keeper: Keeper | None = None
        self.release: list[tuple[str, str]] = []
        self.bad: list[str] = []
        self.held: dict[str, str] = {}

    def kept(self) -> list[str]:
        """Every lease this node must keep alive: held, or finished with its
        acknowledgement (or revisit) still to send."""
        return [
            *self.held,
            *self.acks,
            *(r.rid for r in self.revisits),
            *(u.rid for u in self.untracked),
        ]

    # -- new requests ---------------------------------------------------------------
    def known_duplicate(self, request: Request, fp: bytes, *, early: bool = False) -> bool:
        """Whether the seen cache knows *fp* (the shared filter has it, or will with the
        batch on its way); if so *request* waits in ``known`` for the next commit, which
        counts it (or, after a reset of the job, sends it). *early*: asked where the
        spider yielded it (:mod:`crawlfleet.middlewares.duplicates`): a miss is not
        counted as a lookup (the scheduler looks again), and after a reset the request
        is not sent (it skipped the spider middlewares: depth, referer, a unit's meta)."""
        if early:
            if not self.seen.knows(fp):
                return False
            self.known_early.add(id(request))
        elif fp not in self.seen:
            return False
        self.known.append(request)
        return True

    def settle_known(self, count: int) -> list[Request]:
        """The first *count* of ``known``, counted by a commit: taken out."""
        confirmed = self.known[:count]
        del self.known[:count]
        if self.known_early:
            self.known_early.difference_update(id(r) for r in confirmed)
        return confirmed

    def forget_known(self) -> tuple[list[Request], int]:
        """``known`` after a reset of the job: the requests to send after all, and how
        many dropped early are not."""
        stale, self.known = self.known, []
        early, self.known_early = self.known_early, set()
        resend = [r for r in stale if id(r) not in early]
        return resend, len(stale) - len(resend)

    def add_out(self, request: Request, fp: bytes, payload: bytes, delay_ms: int = 0) -> None:
        self.out.append((request, fp, payload, delay_ms))
        self.seen.add(fp)

    # -- leased requests -------------------------------------------------------------
    @property
    def ready(self) -> int:
        """Leased requests not handed to the engine yet."""
        return len(self.buffer) + len(self.slotted)

    def hold(self, rid: str, site: str) -> None:
        self.held[rid] = site

    def add_ready(self, request: Request, rid: str) -> None:
        self.buffer.append((request, rid))

    def add_slotted(
        self, at: float, late: float, request: Request, rid: str, send_by: float | None = None
    ) -> None:
        """Hold *request* until *at*; the engine may take it up to *late* s after, and
        it must be on its way by *send_by* (default: *at* + *late*)."""
        self.slotted.add(at, late, (request, rid))
        self.send_by[request] = SendWindow(
            at, at + late if send_by is None else max(send_by, at + late)
        )

    def set_aside(self, rid: str) -> None:
        """A leased entry that cannot be decoded: no longer held, reported as bad."""
        self.held.pop(rid, None)
        self.bad.append(rid)

    def take(self, now: float) -> tuple[tuple[Request, str] | None, int]:
        """The next request for the engine at *now* (loop time): a slotted one that is
        due first, else a buffered one (None: none); and how many slotted ones were
        found too late (given back: another lease gives them a new slot)."""
        leased: tuple[Request, str] | None = None
        missed: list[tuple[Request, str]] = []
        if self.slotted:
            leased, missed = self.slotted.take(now)
            for request, rid in missed:
                self.send_by.pop(request, None)
                self.release.append((rid, self.held.pop(rid, "")))
        if leased is None and self.buffer:
            leased = self.buffer.popleft()
        if leased is not None:
            request, rid = leased
            self.handed[request] = rid
        return leased, len(missed)

    def drain_ready(self) -> list[tuple[str, str]]:
        """Remove every leased request not handed to the engine; their (rid, site), no
        longer held, to give back."""
        waiting = [*self.buffer, *self.slotted.drain()]
        self.buffer.clear()
        for request, _rid in waiting:
            self.send_by.pop(request, None)
        return [(rid, self.held.pop(rid, "")) for _request, rid in waiting]

    # -- finished requests -----------------------------------------------------------
    def mark_unstored(self, request: Request) -> None:
        """One of *request*'s items could not be stored: release it, do not ack it."""
        if request in self.handed:
            self.unstored.add(request)

    def recording(self, request: Request) -> bool:
        """A final failure of *request* is on its way to the error registry: it is not
        acknowledged before :meth:`record_settled` says what became of the record
        (once for each call of this). False when *request* is not handed out by this
        node (nothing to hold: the record is written as usual)."""
        if request not in self.handed:
            return False
        self.records[request] = self.records.get(request, 0) + 1
        return True

    def record_settled(self, request: Request, written: bool) -> bool:
        """One failure record of *request* is settled: *written* (durable, or refused
        for good by the state DB) or not (then the request is released, not
        acknowledged). Returns whether this finished the request (an ack or a release
        is waiting to be sent). A request no longer held (given back at close) is
        ignored."""
        left = self.records.get(request)
        if left is None:
            return False
        if not written:
            self.unrecorded.add(request)
        if left > 1:
            self.records[request] = left - 1
            return False
        del self.records[request]
        rid = self.recorded.pop(request, None)
        if rid is None:
            return False  # still with the engine: collect() finishes it
        self._finish(request, rid)
        return True

    def collect(self, inprogress: Collection[Request]) -> int:
        """Requests handed out and no longer in *inprogress* are finished: to
        acknowledge, or to release when an item of theirs was not stored or a failure
        of theirs not recorded; held (in ``recorded``) while a failure record of theirs
        is not settled. Returns how many were released because of an item not stored."""
        unstored = 0
        done = [r for r in self.handed if r not in inprogress]
        for request in done:
            rid = self.handed.pop(request)
            self.send_by.pop(request, None)
            if request in self.unstored:
                self.unstored.discard(request)
                self.records.pop(request, None)
                self.unrecorded.discard(request)
                self.release.append((rid, self.held.pop(rid, "")))
                unstored += 1
                continue
            if self.records and request in self.records:
                self.recorded[request] = rid  # still held: acknowledged once recorded
                continue
            self._finish(request, rid)
        return unstored

    def _finish(self, request: Request, rid: str) -> None:
        """*request* (lease *rid*) is done: acknowledge it, or release it when a
        failure record of its could not be written."""
        if self.unrecorded and request in self.unrecorded:
            self.unrecorded.discard(request)
            self.release.append((rid, self.held.pop(rid, "")))
            return
        site = self.held.pop(rid, None)
        if site is not None:
            self.on_done(site)
        if self.keeper is not None:
            kept = self.keeper(request, rid)
            if isinstance(kept, Revisit):
                self.revisits.append(kept)
                return
            if isinstance(kept, Untrack):
                self.untracked.append(kept)
                return
        self.acks.append(rid)

    def give_back_recorded(self) -> int:
        """At close: release the finished requests whose failure records are still not
        settled (not acknowledged: crawled again later). Returns how many."""
        for request, rid in self.recorded.items():
            self.records.pop(request, None)
            self.unrecorded.discard(request)
            self.release.append((rid, self.held.pop(rid, "")))
        given = len(self.recorded)
        self.recorded.clear()
        return given

    def abandon_handed(self) -> None:
        """At close: what the engine did not finish (a forced stop) and what waits for
        its slot is ready again (so that close gives it back)."""
        for request, rid in self.handed.items():
            self.buffer.append((request, rid))
            self.records.pop(request, None)
            self.unrecorded.discard(request)
        self.handed.clear()
        self.buffer.extend(self.slotted.drain())
        self.unstored.clear()
        self.send_by.clear()

    # -- state ----------------------------------------------------------------------
    @property
    def unsent(self) -> bool:
        """Something waits to go to the frontier (new requests, duplicates to count, acks,
        revisits, untracks, bad entries)."""
        return bool(
            self.out or self.known or self.acks or self.revisits or self.untracked or self.bad
        )

    @property
    def busy(self) -> bool:
        """The node holds a request in any state."""
        return bool(self.buffer or self.slotted or self.handed or self.recorded or self.unsent)

    def __len__(self) -> int:
        return len(self.buffer) + len(self.slotted) + len(self.out)
