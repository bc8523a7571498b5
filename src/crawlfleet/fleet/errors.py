"""Re-crawling a job's registered errors: what ``crawlfleet errors recrawl`` and the
manager's ``POST /api/v1/jobs/{job}/errors/recrawl`` do.

Open errors (of one reason, or all) go back into the job's frontier as the very request
that failed (its stored payload: callback, meta, headers), past the seen-filter, with
``crawlfleet_error`` in its meta so that the node that fetches it successfully marks the
error resolved; a failure again reopens it. They are marked ``queued`` first: an error
is never queued twice by two re-crawls at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from scrapy import Request

from crawlfleet.exceptions import MalformedEntry
from crawlfleet.frontier.base import PartialCommit
from crawlfleet.frontier.records import Outgoing
from crawlfleet.frontier.serialization import RequestCodec, payload_priority, with_meta
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.meta import BAN_META, ERROR_META, IDENTITY_META
from crawlfleet.state.db import StateDB
from crawlfleet.state.errors import recrawl_progress, reopen_errors, take_for_recrawl
from crawlfleet.urls import is_http_url

__all__ = ["ERROR_META", "FRESH_META", "RecrawlResult", "recrawl_errors", "recrawl_standing"]

BATCH = 500
#: A look at a re-crawl's progress reads the back-off of so many sites at most (those
#: with most failures waiting).
BACKOFF_SITES = 100
#: What a failed request's meta says of its last life, left out when it is sent again:
#: a re-crawl starts with its retries, ban tries, redirects and browser identity afresh.
FRESH_META = (
    "retry_times",
    BAN_META,
    "redirect_urls",
    "redirect_times",
    "redirect_ttl",
    "redirect_reasons",
    "download_slot",
    "download_latency",
    "depth",
    "crawlfleet_user_agent",
)


@dataclass
class RecrawlResult:
    queued: int = 0
    #: ids of errors whose stored request could not be read back (queued by URL)
    by_url: list[int] = field(default_factory=list)
    #: ids of the errors queued (marked ``queued`` and in the frontier)
    ids: list[int] = field(default_factory=list)
    #: ids of errors left open: no stored request, and a URL that is no http(s) URL with
    #: a host (:func:`crawlfleet.urls.check_http_url`)
    invalid: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "queued": self.queued,
            "queued_by_url": len(self.by_url),
            "invalid_url": len(self.invalid),
        }


def _outgoing(eid: int, url: str, payload: bytes | None, site: str) -> tuple[Outgoing | None, bool]:
    """The request that re-crawls error *eid* (None: it has no stored request and its URL
    is no http(s) URL with a host), and whether its stored payload served."""
    if payload is not None:
        try:
            again = with_meta(
                payload, {ERROR_META: eid}, drop=FRESH_META, drop_headers_named_by=IDENTITY_META
            )
            return Outgoing(b"", site, payload_priority(payload), again), True
        except MalformedEntry:
            pass
    if not is_http_url(url):
        return None, False
    request = Request(url, meta={ERROR_META: eid}, dont_filter=True)
    return Outgoing(b"", site, 0, RequestCodec(None).encode(request)), False


async def recrawl_errors(
    frontier: JobFrontier,
    db: StateDB,
    *,
    reason: str | None = None,
    limit: int = 10_000,
    max_recrawls: int | None = None,
) -> RecrawlResult:
    """Queue the job's open errors (of *reason*) again (see the module docstring). Redis
    is asked first; errors that could not be queued (Redis failing midway) are open
    again, and the Redis error is raised."""
    job = frontier.keys.job
    await frontier.client.ping()  # before any error is marked queued
    rows = await asyncio.to_thread(
        take_for_recrawl, db, job, reason=reason, limit=limit, max_recrawls=max_recrawls
    )
    result = RecrawlResult()
    queued: set[int] = set()  # indexes of the rows queued
    try:
        if rows:
            await frontier.register_job()
        for i in range(0, len(rows), BATCH):
            out: list[Outgoing] = []
            at: list[int] = []  # the index in rows of each request of out
            for n, (eid, url, _status, payload, site) in enumerate(rows[i : i + BATCH], i):
                request, stored = _outgoing(eid, url, payload, site)
                if request is None:
                    result.invalid.append(eid)
                    continue
                out.append(request)
                at.append(n)
                if not stored:
                    result.by_url.append(eid)
            try:
                committed = await frontier.commit("recrawl", out)
            except PartialCommit as part:  # some shards queued their part
                queued.update(at[j] for j in part.requests)
                result.queued += part.result.queued
                raise
            result.queued += committed.queued
            queued.update(at)
    finally:
        result.ids = [r[0] for n, r in enumerate(rows) if n in queued]
        if len(queued) < len(rows):
            left = [r[0] for n, r in enumerate(rows) if n not in queued]
            await asyncio.to_thread(reopen_errors, db, job, left)
    return result


async def recrawl_standing(
    frontier: JobFrontier, db: StateDB, ids: Sequence[int], *, half_life_ms: int
) -> tuple[dict[str, Any], dict[str, int]]:
    """How the errors *ids* that a re-crawl queued stand now
    (:func:`~crawlfleet.state.errors.recrawl_progress`), and the back-off left (ms) of
    those of the sites they wait on that are backed off (*half_life_ms*: how fast a
    back-off decays, ``CRAWLFLEET_BACKOFF_HALF_LIFE_SECONDS``)."""
    job = frontier.keys.job
    progress = await asyncio.to_thread(recrawl_progress, db, job, ids)
    sites = list(progress["waiting_sites"])[:BACKOFF_SITES]
    found = await frontier.backoffs(sites, half_life_ms=half_life_ms) if sites else {}
    return progress, {site: found[site] for site in sites if site in found}
