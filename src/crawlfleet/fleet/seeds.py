"""Seeds into a job's frontier: what ``crawlfleet seed`` and the manager's
``POST /api/v1/jobs/{job}/seeds`` do. Entries are URLs or JSON seed entries
(:func:`crawlfleet.spiders.seeding.parse_seed`); they are fingerprinted as Scrapy does by
default (a project with its own REQUEST_FINGERPRINTER_CLASS seeds through the job's seed
list instead, which its nodes fingerprint)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field

from scrapy import Request
from scrapy.utils.request import RequestFingerprinter

from crawlfleet.fleet.jobs import list_jobs
from crawlfleet.frontier.records import FINGERPRINT_BYTES, Outgoing
from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.frontier.sites import SiteKeyer
from crawlfleet.settings.config import redact_url
from crawlfleet.spiders.seeding import parse_seed

__all__ = ["BATCH", "EXCERPT", "INVALID_SHOWN", "SeedResult", "parse_entries", "queue_seeds"]

#: Requests committed per script call.
BATCH = 500
#: Invalid entries listed in an answer (the rest are counted: ``invalid_count``).
INVALID_SHOWN = 20
#: Characters of an invalid entry, and of what is wrong with it, that are shown.
EXCERPT = 200


@dataclass
class SeedResult:
    queued: int = 0
    duplicates: int = 0
    #: the job did not exist: these seeds created it
    created: bool = False
    #: an existing job whose name is close to a new job's (a typo?)
    similar: str | None = None
    #: (1-based position, entry (passwords left out) and why, each cut to EXCERPT
    #: characters) of each entry skipped
    invalid: list[tuple[int, str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        """The figures, with the first INVALID_SHOWN invalid entries (all are counted)."""
        return {
            "queued": self.queued,
            "duplicates": self.duplicates,
            "invalid": [
                {"entry": n, "text": t, "error": e} for n, t, e in self.invalid[:INVALID_SHOWN]
            ],
            "invalid_count": len(self.invalid),
            "created": self.created,
            "similar": self.similar,
        }


def parse_entries(entries: Iterable[str], result: SeedResult) -> list[Request]:
    """The requests of *entries*; those that are not seeds go to ``result.invalid``."""
    requests = []
    for n, entry in enumerate(entries, 1):
        try:
            requests.append(parse_seed(entry))
        except ValueError as exc:
            result.invalid.append((n, redact_url(entry)[:EXCERPT], str(exc)[:EXCERPT]))
    return requests


async def queue_seeds(
    frontier: JobFrontier, requests: list[Request], site_key: str, result: SeedResult
) -> SeedResult:
    """Register the job and commit *requests* to its frontier (deduplicated against
    everything it has seen), counting into *result*; a job that did not exist is said to
    be created, with an existing job of a close name (``result.similar``)."""
    keys = frontier.keys
    known = await list_jobs(frontier.client, keys.prefix)
    if keys.job not in known:
        result.created = True
        close = difflib.get_close_matches(keys.job, known, n=1, cutoff=0.75)
        result.similar = close[0] if close else None
    await frontier.register_job()
    fingerprinter = RequestFingerprinter()
    keyer = SiteKeyer(site_key)
    codec = RequestCodec(None)
    for i in range(0, len(requests), BATCH):
        chunk = requests[i : i + BATCH]
        for r in chunk:
            if keyer.needs_resolving(r):
                await keyer.resolve(keyer.host(r))
        committed = await frontier.commit(
            "seed",
            [
                Outgoing(
                    fingerprinter.fingerprint(r)[:FINGERPRINT_BYTES],
                    keyer.site(r),
                    r.priority,
                    codec.encode(r),
                )
                for r in chunk
            ],
        )
        result.queued += committed.queued
        result.duplicates += committed.duplicates
    return result
