"""What a node sends to its job's frontier: new requests, acknowledgements, leases given back.

The sync loop (:mod:`crawlfleet.node.sync`) calls it each round; its contract:

- New requests (``ledger.out``) go in batches of at most CRAWLFLEET_FLUSH_BATCH, one
  ``commit`` each, when :meth:`Outbox.due` says so, or with the node's lease (one
  ``commit_lease``: a round in one call) whenever it leases. The acknowledgements of finished
  requests (and the revisits and untracks of tracked pages, which stand for theirs)
  travel with the batch that empties ``ledger.out``, never ahead of it: a page is
  acknowledged only once the requests it produced are queued.
- A commit done in part (:class:`~crawlfleet.frontier.base.PartialCommit`: a sharded
  job with a shard down) keeps only what was not done for the next try, and never sends
  again what was (a request that bypasses the seen-filter would be queued twice).
- The duplicates the node's seen cache found without asking Redis (``ledger.known``)
  are settled with what each commit says of the job's epoch: counted as duplicates, or,
  if the job was reset since the cache learned them, sent after all.
- Requests handed in from outside the engine (:meth:`Outbox.feed`: a campaign's units)
  are committed in order, each feed once.
- Leases given back (unstored pages, missed slots) are released, and kept for the next
  try when the release fails.

Every call that talks to Redis raises its errors (REDIS_ERRORS, PartialCommit among
them) with the ledger left as described: the loop waits the outage out and calls again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from scrapy import Request, Spider

from crawlfleet.exceptions import SerializationError
from crawlfleet.frontier.base import PartialCommit
from crawlfleet.frontier.records import CommitBatch, CommitResult, LeaseAsk, LeaseResult, Outgoing
from crawlfleet.frontier.sites import SiteKeyer
from crawlfleet.meta import DELAY_META
from crawlfleet.node.core import NodeCore
from crawlfleet.node.leasing import Leaser
from crawlfleet.node.ledger import Outbound
from crawlfleet.node.seeds import requests_from_seed

__all__ = ["AHEAD_FLUSH_FACTOR", "PLENTY_FLUSH_FACTOR", "WAITING_REACH_SECONDS", "Outbox"]

logger = logging.getLogger(__name__)

#: While the job has plenty queued (Leaser.plenty), new requests and acknowledgements
#: wait up to this many times CRAWLFLEET_FLUSH_SECONDS for the node's next lease.
PLENTY_FLUSH_FACTOR = 4
#: While the node leases seconds of work at once (Leaser.ahead), they wait up to this many
#: times CRAWLFLEET_FLUSH_SECONDS (its leases come seconds apart on a node that parses
#: large pages, and a commit of its own costs Redis a round's fixed cost).
AHEAD_FLUSH_FACTOR = 16
#: A node that queued a retry with a delay reclaims it this long after its time (its
#: clock and Redis's differ by a round trip).
WAITING_REACH_SECONDS = 0.01


class Outbox:
    """Sends what the ledger of *core* holds for its frontier (see the module
    docstring). *reclaim_by* is told each monotonic time at which delayed requests just
    queued come due (the node reclaims them then)."""

    def __init__(
        self,
        core: NodeCore,
        *,
        leaser: Leaser,
        sites: SiteKeyer,
        fingerprint: Callable[[Request], bytes],
        reclaim_by: Callable[[float], None],
    ) -> None:
        self.core = core
        self.leaser = leaser
        self.sites = sites
        #: the frontier's fingerprint of a request (FINGERPRINT_BYTES long)
        self.fingerprint = fingerprint
        self.reclaim_by = reclaim_by
        #: the spider (set at open): its seeds' requests, and log lines
        self.spider: Spider | None = None
        #: monotonic time of the last batch sent
        self.last_flush = 0.0
        #: event-loop time at which the last batch was sent (a lease with it was asked)
        self.sent_at = 0.0
        self._logged_dup = False
        #: requests handed in by feed(), committed in order
        self._feeds: list[tuple[list[tuple[Request, Outgoing]], asyncio.Future[int]]] = []
        #: requests of the first feed queued by a commit done in part (PartialCommit)
        self._fed_before = 0

    # -- finished requests -------------------------------------------------------------
    def collect_finished(self) -> None:
        """Requests the engine no longer has in progress are finished: acknowledge."""
        if not self.core.ledger.handed:
            return
        inprogress = self.core.engine.inprogress()
        if inprogress is None:
            return  # no engine slot (not open yet, or closed): nothing can be known
        self.core.stats.inc("crawlfleet/frontier/unstored", self.core.ledger.collect(inprogress))

    async def release_given_back(self) -> None:
        """Release the leases given back (unstored pages, missed slots)."""
        ledger = self.core.ledger
        if ledger.release:
            given, ledger.release = ledger.release, []
            try:
                back = await self.core.frontier.release(self.core.node_id, given)
            except BaseException:
                ledger.release[:0] = given  # tried again next round
                raise
            self.core.stats.inc("crawlfleet/frontier/released", back)

    # -- new requests ------------------------------------------------------------------
    def due(self, now: float) -> bool:
        """Send a batch when it is full, when it has waited CRAWLFLEET_FLUSH_SECONDS, or
        at once when it holds new requests and the buffer runs low while the job has
        little queued (this node, or another, may be waiting for exactly that work) or
        when the node has nothing left in hand. (Each commit costs Redis a script call
        however small: with plenty queued, batches wait for their time, PLENTY_FLUSH_FACTOR
        times as long, AHEAD_FLUSH_FACTOR times while the node leases ahead, and mostly
        go with the node's next lease in one call; not while the node leases nothing:
        see :meth:`~crawlfleet.node.leasing.Leaser.leases_soon`.)"""
        ledger = self.core.ledger
        if not ledger.unsent:
            return False
        if len(ledger.out) >= self.core.config.flush_batch:
            return True
        if ledger.out and self.leaser.low() and not self.leaser.plenty():
            return True
        if not (ledger.buffer or ledger.slotted or ledger.handed):
            return True  # nothing left in hand: the job may be finishing
        wait = self.core.config.flush_seconds
        if self.leaser.leases_soon():  # they may wait for its next lease
            if self.leaser.ahead():
                wait *= AHEAD_FLUSH_FACTOR  # no node waits for them: they go with a lease
            elif self.leaser.plenty():
                wait *= PLENTY_FLUSH_FACTOR
        return now - self.last_flush >= wait

    def last_batch(self) -> bool:
        """The next batch empties ``ledger.out`` (it carries the acknowledgements)."""
        return len(self.core.ledger.out) <= self.core.config.flush_batch

    async def flush(self, lease: LeaseAsk | None = None) -> LeaseResult | None:
        """Send one batch of new requests (with the acknowledgements, if it is the last);
        with *lease*, the node's lease too, in the same call (see
        :meth:`~crawlfleet.frontier.base.Committer.commit_lease`): its result (None:
        none asked for, or its call failed after the commit was done), asked for at
        :attr:`sent_at`."""
        ledger = self.core.ledger
        batch = ledger.out[: self.core.config.flush_batch]
        # acknowledgements travel with or after the requests their pages produced
        send_acks = len(batch) == len(ledger.out)
        acks = list(ledger.acks) if send_acks else []
        revisits = list(ledger.revisits) if send_acks else []
        untracked = list(ledger.untracked) if send_acks else []
        bad = list(ledger.bad)
        for request, _fp, _payload, _delay in batch:
            if self.sites.needs_resolving(request):
                await self.sites.resolve(self.sites.host(request))
        outgoing = [
            Outgoing(fp, self.sites.site(request), request.priority, payload, delay)
            for request, fp, payload, delay in batch
        ]
        seen = ledger.seen
        commit = CommitBatch(
            self.core.node_id,
            outgoing,
            acks,
            bad,
            len(ledger.known),
            seen.epoch,
            revisits,
            untracked,
            seen.place,
        )
        leased: LeaseResult | None = None
        self.sent_at = asyncio.get_event_loop().time()
        try:
            if lease is None:
                result = await self.core.frontier.commit_batch(commit)
            else:
                result, leased = await self.core.frontier.commit_lease(commit, lease)
        except PartialCommit as part:
            # some shards took their part: only the rest is sent again (requests that
            # bypass the seen-filter must not be queued twice)
            self._committed(batch, part.result)
            self._settle_known(part.result, [fp for _r, fp, *_rest in batch])
            ledger.out[: len(batch)] = [e for i, e in enumerate(batch) if i not in part.requests]
            ledger.acks[:] = [rid for rid in ledger.acks if rid not in part.acks]
            ledger.revisits[:] = [r for r in ledger.revisits if r.rid not in part.acks]
            ledger.untracked[:] = [u for u in ledger.untracked if u.rid not in part.acks]
            raise
        delays = [delay for *_rest, delay in batch if delay > 0]
        delays += [r.delay_ms for r in revisits if r.delay_ms > 0]
        sent = time.monotonic()
        for delay in set(delays):  # reclaim each (with any other due lease) once it is due
            self.reclaim_by(sent + delay / 1000 + WAITING_REACH_SECONDS)
        self.last_flush = time.monotonic()
        del ledger.out[: len(batch)]
        if send_acks:
            del ledger.acks[: len(acks)]
            del ledger.revisits[: len(revisits)]
            del ledger.untracked[: len(untracked)]
        del ledger.bad[: len(bad)]
        self._committed(batch, result)
        self._settle_known(result, [fp for _r, fp, *_rest in batch])
        return leased

    def _committed(self, batch: list[Outbound], result: CommitResult) -> None:
        """Count what a commit of *batch* (ledger entries) did."""
        self.core.stats.inc("crawlfleet/frontier/queued", result.queued)
        self.core.stats.inc("crawlfleet/frontier/acked", result.acked)
        self.core.stats.inc("crawlfleet/frontier/revisited", result.revisited)
        self.core.stats.inc("crawlfleet/frontier/untracked", result.untracked)
        if result.queued:
            self.leaser.work_arrived()
        duplicates = [batch[i][0] for i in result.duplicate_indexes]
        self.count_duplicates(duplicates)
        for request in duplicates:
            self.core.engine.dropped(request)

    def _settle_known(self, result: CommitResult, committed: list[bytes]) -> None:
        """Settle the duplicates the seen cache found (``ledger.known``) with what a
        commit (of the fingerprints *committed*) says of the job's epoch: counted by it,
        they are duplicates; if the job was reset since the cache learned them, the cache
        starts over and they are sent after all. Then the cache takes what the commit
        read of the job's feed (of the commit's epoch)."""
        ledger, seen = self.core.ledger, self.core.ledger.seen
        if not result.epoch:
            return  # not read (a sharded commit without shard 0): they wait
        if seen.epoch and result.epoch != seen.epoch:
            self.job_was_reset(result.epoch, committed)
        elif seen.epoch:
            confirmed = ledger.settle_known(result.known_counted)
            # the scheduler said "dropped" to the engine already
            self.count_duplicates(confirmed)
        else:
            seen.epoch = result.epoch  # the first commit: the next one counts them
        seen.fed(result.feed_place, result.feed)

    def leased_in(self, epoch: str) -> None:
        """A lease came from the job's *epoch* ("": not read): if the seen cache is of
        another one, the job was reset under this node, which forgets the cache before
        it takes the lease's requests, so that no link of a page of the new epoch is
        judged by what the old one had seen."""
        seen = self.core.ledger.seen
        if epoch and seen.epoch and epoch != seen.epoch:
            self.job_was_reset(epoch)

    def job_was_reset(self, epoch: str, committed: Sequence[bytes] = ()) -> None:
        """The job is in *epoch* now, not the seen cache's: the cache starts over (with
        the fingerprints *committed* to the new epoch), and the requests it held as
        known duplicates are sent to be judged by the new epoch's seen-filter (not those
        dropped where the spider yielded them: they skipped the spider middlewares)."""
        ledger, seen = self.core.ledger, self.core.ledger.seen
        stale, unsent = ledger.forget_known()
        seen.clear(epoch)
        for fp in committed:  # in the filter of this epoch now
            seen.add(fp)
        logger.warning(
            "Job %s was reset while this node ran: its cache of seen fingerprints "
            "starts over, %d requests it held for duplicates are sent%s",
            self.core.config.job,
            len(stale),
            f" ({unsent} dropped where the spider yielded them are not)" if unsent else "",
        )
        for request in stale:
            request.meta.pop(DELAY_META, None)  # a back-off is not kept across a reset
            try:
                payload = self.leaser.codec.encode(request)
            except SerializationError as exc:
                logger.error("Dropped request: %s", exc, extra={"spider": self.spider})
                continue
            ledger.add_out(request, self.fingerprint(request), payload)

    def count_duplicates(self, requests: list[Request]) -> None:
        """*requests* were duplicates (known here, or to the shared seen-filter)."""
        if not requests:
            return
        self.core.stats.inc("crawlfleet/scheduler/duplicates", len(requests))
        self.core.stats.inc("dupefilter/filtered", len(requests))
        if not self._logged_dup:
            logger.debug(
                "Filtered duplicate request: %(request)s - no more duplicates will be shown",
                {"request": requests[0]},
                extra={"spider": self.spider},
            )
            self._logged_dup = True

    # -- requests from outside the engine ----------------------------------------------
    @property
    def feeding(self) -> bool:
        """Fed requests wait to be committed."""
        return bool(self._feeds)

    def feed(self, requests: list[Request]) -> asyncio.Future[int]:
        """Queue *requests* in the frontier from outside the engine (a campaign's units):
        encoded now (SerializationError raised here), committed by :meth:`commit_feeds`,
        in order; the future gives how many were new (not seen)."""
        pairs = []
        for request in requests:
            payload = self.leaser.codec.encode(request)
            fp = b"" if request.dont_filter else self.fingerprint(request)
            pairs.append((request, Outgoing(fp, "", request.priority, payload)))
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._feeds.append((pairs, done))
        return done

    async def commit_feeds(self) -> None:
        """Commit the fed requests, feed by feed."""
        while self._feeds:
            pairs, done = self._feeds[0]
            outgoing = []
            for request, out in pairs:
                if self.sites.needs_resolving(request):
                    await self.sites.resolve(self.sites.host(request))
                outgoing.append(
                    Outgoing(out.fp, self.sites.site(request), out.priority, out.payload)
                )
            try:
                result = await self.core.frontier.commit(
                    self.core.node_id, outgoing, epoch=self.core.ledger.seen.epoch
                )
            except PartialCommit as part:  # sent again: only what was not done
                self._feeds[0] = ([p for i, p in enumerate(pairs) if i not in part.requests], done)
                self._fed_before += part.result.queued
                raise
            self._feeds.pop(0)
            self._settle_known(result, [out.fp for out in outgoing])
            queued, self._fed_before = result.queued + self._fed_before, 0
            if queued:
                self.leaser.work_arrived()
            if not done.done():
                done.set_result(queued)

    def seed_outbound(self, raw: bytes) -> list[Outbound]:
        """The requests of seed entry *raw*, ready to queue: each through the seen-filter
        (a scrapy-redis spider's seeds are dont_filter: a seed read again after a crash,
        or linked from a page, must not be fetched twice)."""
        return [
            (request, self.fingerprint(request), self.leaser.codec.encode(request), 0)
            for request in requests_from_seed(self.spider, raw)
        ]

    async def queue_now(self, outgoing: list[Outbound]) -> None:
        """Send *outgoing* (and whatever waits before it) now."""
        self.core.ledger.out.extend(outgoing)
        while self.core.ledger.out:
            await self.flush()
