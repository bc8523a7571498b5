"""The audit of changes made through the manager: who, what, on which job, when."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select

from crawlfleet.state.db import StateDB
from crawlfleet.state.models import Event, utcnow

__all__ = ["list_events", "record_event"]


def record_event(
    db: StateDB, actor: str, action: str, job: str | None, detail: dict[str, Any]
) -> None:
    """Keep one change; *detail* must hold no secret (it is served back)."""
    with db.session() as s:
        s.add(
            Event(
                at=utcnow(),
                actor=actor,
                action=action,
                job=job,
                detail=json.dumps(detail, sort_keys=True, default=str),
            )
        )


def list_events(db: StateDB, *, job: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """The newest changes first (of one *job* when given), at most *limit*."""
    query = select(Event).order_by(Event.at.desc(), Event.id.desc()).limit(limit)
    if job is not None:
        query = query.where(Event.job == job)
    with db.session() as s:
        return [
            {
                "at": e.at.isoformat(timespec="milliseconds") + "Z",
                "actor": e.actor,
                "action": e.action,
                "job": e.job,
                "detail": json.loads(e.detail),
            }
            for e in s.scalars(query)
        ]
