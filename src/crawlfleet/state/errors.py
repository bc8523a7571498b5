"""The error registry: requests that failed for good, per job, kept in the state DB.

Nodes add failures in batches (:func:`record_failures`: one row per job and request
fingerprint, counted again on each new failure, back to ``open``); a re-crawl takes open
rows (:func:`take_for_recrawl`: ``queued``) and a node that then fetches such a request
successfully resolves it (:func:`resolve_errors`). Reads: :func:`list_errors`,
:func:`error_stats`, :func:`recrawl_progress`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError, OperationalError

from crawlfleet.exceptions import ConfigError
from crawlfleet.state.db import StateDB
from crawlfleet.state.models import CrawlError, iso, utcnow
from crawlfleet.state.records import REASONS, STATES, Failure

logger = logging.getLogger(__name__)

__all__ = [
    "REASONS",
    "STATES",
    "Failure",
    "error_stats",
    "list_errors",
    "record_failures",
    "recrawl_progress",
    "reopen_errors",
    "resolve_errors",
    "take_for_recrawl",
]


def _check(reason: str | None, state: str | None) -> None:
    if reason is not None and reason not in REASONS:
        raise ConfigError(f"reason must be one of {', '.join(REASONS)}, got {reason!r}")
    if state is not None and state not in STATES:
        raise ConfigError(f"state must be one of {', '.join(STATES)}, got {state!r}")


def record_failures(db: StateDB, failures: Iterable[Failure]) -> int:
    """Add *failures* (a new row, or one more failure of a known request: its figures
    and reason follow the newest, and it is open again); returns how many were kept."""
    done = 0
    for failure in failures:
        for _ in range(5):  # a row another node inserts meanwhile: update it instead
            try:
                _record(db, failure)
                done += 1
                break
            except IntegrityError:
                continue
            except OperationalError as exc:
                if not _conflict(exc):
                    raise
        else:
            logger.warning("Error registry: %s could not be recorded (conflicts)", failure.url)
    return done


def _conflict(exc: OperationalError) -> bool:
    """A deadlock or serialization failure between nodes writing at once (MariaDB's
    gap locks on the unique key, PostgreSQL's 40P01): worth trying again."""
    orig = exc.orig
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if code in ("40001", "40P01"):
        return True
    args: tuple[object, ...] = tuple(getattr(orig, "args", ()))
    return bool(args) and args[0] in (1205, 1213)  # lock wait timeout, deadlock


def _record(db: StateDB, f: Failure) -> None:
    # one UPDATE that counts in SQL (two nodes failing on one request both count), else
    # an INSERT; the caller retries when another node inserted the row meanwhile
    values: dict[str, Any] = {
        "url": f.url,
        "site": f.site[:255],
        "unit": f.unit,
        "reason": f.reason,
        "detail": " ".join(f.detail.split())[:500],
        "http_status": f.http_status,
        "attempts": f.attempts,
        "last_seen": f.at,
        "node": f.node[:100],
        "stack": f.stack,
        "state": "open",
        "resolved_at": None,
    }
    if f.payload is not None:
        values["payload"] = f.payload
    with db.session() as s:
        result = s.execute(
            update(CrawlError)
            .where(CrawlError.job == f.job, CrawlError.fingerprint == f.fingerprint)
            .values(failures=CrawlError.failures + 1, **values)
        )
        if not result.rowcount:  # type: ignore[attr-defined]
            s.add(
                CrawlError(
                    job=f.job,
                    fingerprint=f.fingerprint,
                    first_seen=f.at,
                    failures=1,
                    recrawls=0,
                    **values,
                )
            )


def _update_ids(
    db: StateDB, job: str, ids: Sequence[int], only: Any, values: dict[str, Any]
) -> int:
    """Set *values* on *job*'s errors *ids* that match *only*; how many changed."""
    if not ids:
        return 0
    with db.session() as s:
        result = s.execute(
            update(CrawlError)
            .where(CrawlError.job == job, CrawlError.id.in_(list(ids)), only)
            .values(**values)
        )
        return int(result.rowcount or 0)  # type: ignore[attr-defined]


def resolve_errors(db: StateDB, job: str, ids: Sequence[int]) -> int:
    """Mark the re-crawled errors *ids* of *job* resolved (their request succeeded)."""
    return _update_ids(
        db, job, ids, CrawlError.state != "resolved", {"state": "resolved", "resolved_at": utcnow()}
    )


def _view(e: CrawlError, *, stack: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": e.id,
        "url": e.url,
        "site": e.site,
        "unit": e.unit,
        "reason": e.reason,
        "detail": e.detail,
        "http_status": e.http_status,
        "failures": e.failures,
        "attempts": e.attempts,
        "recrawls": e.recrawls,
        "first_seen": iso(e.first_seen),
        "last_seen": iso(e.last_seen),
        "node": e.node,
        "state": e.state,
        "resolved_at": iso(e.resolved_at),
    }
    if stack:
        out["stack"] = e.stack
    return out


def list_errors(
    db: StateDB,
    job: str,
    *,
    reason: str | None = None,
    state: str | None = "open",
    limit: int = 100,
    offset: int = 0,
    stack: bool = False,
    by_id: bool = False,
) -> list[dict[str, Any]]:
    """*job*'s errors, the latest failure first (of one *reason*, in one *state*: None
    for all); *by_id*: in the order they were first recorded, stable for paging while
    nodes write."""
    _check(reason, state)
    query = select(CrawlError).where(CrawlError.job == job)
    if reason is not None:
        query = query.where(CrawlError.reason == reason)
    if state is not None:
        query = query.where(CrawlError.state == state)
    if by_id:
        query = query.order_by(CrawlError.id)
    else:
        query = query.order_by(CrawlError.last_seen.desc(), CrawlError.id.desc())
    with db.session() as s:
        return [_view(e, stack=stack) for e in s.scalars(query.offset(offset).limit(limit))]


def error_stats(db: StateDB, job: str) -> dict[str, Any]:
    """Counts of *job*'s errors by state and reason, and the sites with most open."""
    with db.session() as s:
        by = s.execute(
            select(CrawlError.state, CrawlError.reason, func.count())
            .where(CrawlError.job == job)
            .group_by(CrawlError.state, CrawlError.reason)
        ).all()
        sites = s.execute(
            select(CrawlError.site, func.count())
            .where(CrawlError.job == job, CrawlError.state == "open")
            .group_by(CrawlError.site)
            .order_by(func.count().desc(), CrawlError.site)
            .limit(10)
        ).all()
    states: dict[str, int] = dict.fromkeys(STATES, 0)
    reasons: dict[str, int] = {}
    for state, reason, count in by:
        states[state] = states.get(state, 0) + int(count)
        if state == "open":
            reasons[reason] = reasons.get(reason, 0) + int(count)
    return {
        "job": job,
        "total": sum(states.values()),
        "by_state": states,
        "open_by_reason": dict(sorted(reasons.items())),
        "open_by_site": {site: int(count) for site, count in sites},
    }


def take_for_recrawl(
    db: StateDB,
    job: str,
    *,
    reason: str | None = None,
    limit: int = 10_000,
    max_recrawls: int | None = None,
) -> list[tuple[int, str, int | None, bytes | None, str]]:
    """Open errors of *job* (of one *reason*; re-crawled fewer than *max_recrawls*
    times), marked ``queued`` with one more re-crawl: ``(id, url, http_status, payload,
    site)`` each, oldest failure first."""
    _check(reason, None)
    query = select(CrawlError).where(CrawlError.job == job, CrawlError.state == "open")
    if reason is not None:
        query = query.where(CrawlError.reason == reason)
    if max_recrawls is not None:
        query = query.where(CrawlError.recrawls < max_recrawls)
    query = query.order_by(CrawlError.last_seen, CrawlError.id).limit(limit)
    with db.session() as s:
        rows = list(s.scalars(query.with_for_update()))
        for row in rows:
            row.state = "queued"
            row.recrawls += 1
        return [(r.id, r.url, r.http_status, r.payload, r.site) for r in rows]


def reopen_errors(db: StateDB, job: str, ids: Sequence[int]) -> int:
    """Undo :func:`take_for_recrawl` for *ids* (they could not be queued): open again,
    one re-crawl less."""
    return _update_ids(
        db,
        job,
        ids,
        CrawlError.state == "queued",
        {"state": "open", "recrawls": CrawlError.recrawls - 1},
    )


#: Ids asked about in one query (bound parameters stay well under every database's limit).
IDS_PER_QUERY = 500


def recrawl_progress(db: StateDB, job: str, ids: Sequence[int]) -> dict[str, Any]:
    """How the errors *ids* of *job*, queued by one re-crawl, stand now: ``taken``
    (how many), ``queued`` (not fetched yet), ``resolved`` (fetched, fixed), ``open``
    (failed again), ``round`` (the most re-crawls any of them has had), and
    ``waiting_sites``: site -> errors still queued, most first."""
    out: dict[str, Any] = {"taken": len(ids), "queued": 0, "resolved": 0, "open": 0, "round": 0}
    waiting: dict[str, int] = {}
    unique = sorted(set(ids))
    with db.session() as s:
        for i in range(0, len(unique), IDS_PER_QUERY):
            chunk = unique[i : i + IDS_PER_QUERY]
            for state, site, count, most in s.execute(
                select(
                    CrawlError.state, CrawlError.site, func.count(), func.max(CrawlError.recrawls)
                )
                .where(CrawlError.job == job, CrawlError.id.in_(chunk))
                .group_by(CrawlError.state, CrawlError.site)
            ):
                out[state] = out.get(state, 0) + int(count)
                out["round"] = max(out["round"], int(most or 0))
                if state == "queued":
                    waiting[site] = waiting.get(site, 0) + int(count)
    out["waiting_sites"] = dict(sorted(waiting.items(), key=lambda p: (-p[1], p[0])))
    return out
