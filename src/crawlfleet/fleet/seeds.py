"""Seeds into a job's frontier: what ``crawlfleet seed`` and the manager's
``POST /api/v1/jobs/{job}/seeds`` do, in two steps both call: :func:`seed_batches` reads
the entries (URLs or JSON seed entries, :func:`crawlfleet.spiders.seeding.parse_seed`)
as a stream, in batches, and :func:`queue_seeds` commits each batch as it comes, so
that memory stays flat however many seeds there are. Each seed is put in the form the
frontier stores (:mod:`crawlfleet.fleet.seedform`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import difflib
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from crawlfleet.fleet.jobs import list_jobs
from crawlfleet.fleet.seedform import SeedForm, seed_form
from crawlfleet.frontier.records import CommitResult, Outgoing
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.frontier.sites import SiteKeyer
from crawlfleet.settings.config import redact_url

__all__ = [
    "BATCH",
    "EXCERPT",
    "INVALID_KEPT",
    "INVALID_SHOWN",
    "SeedResult",
    "queue_seeds",
    "seed_batches",
]

#: Seeds read, then committed in one script call: what one call holds Redis for
#: (about 5 ms) and the most seeds (two batches) held in memory at once.
BATCH = 500
#: Invalid entries kept to be shown (the rest are counted: ``invalid_count``).
INVALID_KEPT = 100
#: Invalid entries listed in an API answer.
INVALID_SHOWN = 20
#: Characters of an invalid entry, and of what is wrong with it, that are kept.
EXCERPT = 200


@dataclass
class SeedResult:
    queued: int = 0
    duplicates: int = 0
    #: entries read so far, seeds or not
    entries: int = 0
    #: the job did not exist: these seeds created it
    created: bool = False
    #: an existing job whose name is close to a new job's (a typo?)
    similar: str | None = None
    #: entries that are not seeds
    invalid_count: int = 0
    #: (1-based position, entry (passwords left out) and why, each cut to EXCERPT
    #: characters) of the first INVALID_KEPT entries skipped
    invalid: list[tuple[int, str, str]] = field(default_factory=list)

    def skip(self, n: int, entry: str, why: str) -> None:
        """Count entry *n*, not a seed because of *why*; keep it if it is among the first."""
        self.invalid_count += 1
        if len(self.invalid) < INVALID_KEPT:
            self.invalid.append((n, redact_url(entry)[:EXCERPT], why[:EXCERPT]))

    def as_dict(self) -> dict[str, object]:
        """The figures, with the first INVALID_SHOWN invalid entries (all are counted)."""
        return {
            "queued": self.queued,
            "duplicates": self.duplicates,
            "invalid": [
                {"entry": n, "text": t, "error": e} for n, t, e in self.invalid[:INVALID_SHOWN]
            ],
            "invalid_count": self.invalid_count,
            "created": self.created,
            "similar": self.similar,
        }


def seed_batches(
    entries: Iterable[str], result: SeedResult, size: int = BATCH
) -> Iterator[list[SeedForm]] | None:
    """The seeds of *entries* in batches of up to *size*, read from *entries* as each
    batch is asked for; entries that are not seeds are counted into *result*. None when
    no entry is a seed (*entries* have all been read then): nothing is to be queued, and
    nothing needs Redis. (The first batch is read before this returns.)"""
    batches = _batches(entries, result, size)
    first = next(batches, None)
    return None if first is None else itertools.chain([first], batches)


def _batches(entries: Iterable[str], result: SeedResult, size: int) -> Iterator[list[SeedForm]]:
    batch: list[SeedForm] = []
    for n, entry in enumerate(entries, 1):
        result.entries = n
        try:
            batch.append(seed_form(entry))
        except ValueError as exc:
            result.skip(n, entry, str(exc))
            continue
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


async def queue_seeds(
    frontier: JobFrontier,
    batches: Iterable[list[SeedForm]],
    site_key: str,
    result: SeedResult,
    *,
    progress: Callable[[SeedResult], None] | None = None,
) -> SeedResult:
    """Register the job and commit *batches* to its frontier (deduplicated against
    everything it has seen), counting into *result*, with ``progress(result)`` after
    each batch; a job that did not exist is said to be created, with an existing job of
    a close name (``result.similar``).

    Each batch is committed as it comes (the next one is read while Redis runs the
    script), so a failure part way (Redis gone, the process killed, an input that turns
    out not to be text) leaves every batch before it queued, once. Seeding the same
    entries again is harmless: the seen-filter drops what is queued already (counted
    as already seen), so a seeding that stopped is finished by running it again."""
    keys = frontier.keys
    known = await list_jobs(frontier.client, keys.prefix)
    if keys.job not in known:
        result.created = True
        close = difflib.get_close_matches(keys.job, known, n=1, cutoff=0.75)
        result.similar = close[0] if close else None
    await frontier.register_job()
    keyer = SiteKeyer(site_key)
    pending: asyncio.Task[CommitResult] | None = None

    def count(committed: CommitResult) -> None:
        result.queued += committed.queued
        result.duplicates += committed.duplicates
        if progress is not None:
            progress(result)

    source = iter(batches)
    loop = asyncio.get_running_loop()
    # one reader thread for the whole seeding: the default executor may start a new
    # thread for a call whose predecessor's thread is not idle yet (a busy machine),
    # and each thread's allocations take memory of their own
    reader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="seed-reader")
    try:
        while True:
            # the next batch is read in a thread while this loop sends the last one and
            # reads its reply: the seeds are parsed while Redis runs the script
            batch = await loop.run_in_executor(reader, next, source, None)
            if batch is None:
                break
            if keyer.mode == "ip":
                for seed in batch:
                    await keyer.resolve(seed.host)
            outgoing = [
                Outgoing(s.fp, keyer.site_of_host(s.host), s.priority, s.payload) for s in batch
            ]
            if pending is not None:
                sent, pending = pending, None
                count(await sent)
            pending = asyncio.ensure_future(frontier.commit("seed", outgoing))
        if pending is not None:
            sent, pending = pending, None
            count(await sent)
    finally:
        reader.shutdown(wait=False)
        if pending is not None:  # reading the next batch failed: the one sent stands
            await _settle(pending, count)
    return result


async def _settle(
    pending: asyncio.Task[CommitResult], count: Callable[[CommitResult], None]
) -> None:
    """Wait for the commit *pending* and *count* it, unless it fails or this task is
    cancelled: the error that stopped the seeding is the one to tell."""
    try:
        count(await pending)
    except asyncio.CancelledError:
        pending.cancel()
        raise
    except Exception:  # the reading's error is raised instead
        pass
