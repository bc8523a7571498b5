"""Timers: cron expressions that act on a job (run, pause, resume, drain, stop), kept in
the state DB. ``claim`` is a compare-and-set of ``next_fire_at``: of several managers,
the one that moves it fires the timer, once. A due time that no manager was running to
fire is recorded as missed, never dropped silently."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from croniter import croniter
from sqlalchemy import delete, select, update

from crawlfleet.exceptions import ConfigError, NotFound
from crawlfleet.redis.connection import redact
from crawlfleet.state.db import StateDB
from crawlfleet.state.models import Timer, TimerFire, check_name, iso, utcnow

__all__ = [
    "ACTIONS",
    "claim",
    "create_timer",
    "delete_timer",
    "due_timers",
    "due_times",
    "list_fires",
    "list_timers",
    "next_due",
    "record_fire",
    "set_enabled",
]

ACTIONS = ("run", "pause", "resume", "drain", "stop")
#: Due times looked at most when a manager comes back after a long time.
MAX_DUE_TIMES = 1000


def next_due(cron: str, after: datetime) -> datetime:
    """The first due time of *cron* after *after* (UTC, naive)."""
    return croniter(cron, after).get_next(datetime)  # type: ignore[no-any-return]


def due_times(cron: str, first: datetime, until: datetime) -> list[datetime]:
    """*first* and the due times after it up to *until* (at most MAX_DUE_TIMES)."""
    out = [first]
    it = croniter(cron, first)
    while len(out) < MAX_DUE_TIMES:
        t: datetime = it.get_next(datetime)
        if t > until:
            break
        out.append(t)
    return out


def _view(t: Timer, db: StateDB, *, raw: bool = False) -> dict[str, Any]:
    """What is shown of *t* (a URL's password in its params as ***), or with *raw*
    its params as they are, to fire it."""
    params = db.secrets.unseal(t.params)
    return {
        "name": t.name,
        "job": t.job,
        "action": t.action,
        "cron": t.cron,
        "params": json.loads(params if raw else redact(params)),
        "enabled": t.enabled,
        "created_by": t.created_by,
        "created_at": iso(t.created_at),
        "next_fire_at": iso(t.next_fire_at) if t.enabled else None,
    }


def create_timer(
    db: StateDB, name: str, job: str, action: str, cron: str, params: dict[str, Any], actor: str
) -> dict[str, Any]:
    """A new enabled timer; ConfigError for a bad name, action or cron expression, or a
    name in use."""
    check_name("timer", name)
    if action not in ACTIONS:
        raise ConfigError(f"timer action must be one of {', '.join(ACTIONS)}, got {action!r}")
    if not croniter.is_valid(cron):
        raise ConfigError(
            f"cron {cron!r} is not valid: 5 fields (minute hour day month weekday), "
            "or 6 with seconds last"
        )
    now = utcnow()
    row = Timer(
        name=name,
        job=job,
        action=action,
        cron=cron,
        params=db.secrets.seal(json.dumps(params, sort_keys=True)),
        enabled=True,
        created_by=actor,
        created_at=now,
        next_fire_at=next_due(cron, now),
    )
    if not db.add_new(row):
        raise ConfigError(f"a timer is already named {name!r}")
    return _view(row, db)


def list_timers(db: StateDB) -> list[dict[str, Any]]:
    with db.session() as s:
        return [_view(t, db) for t in s.scalars(select(Timer).order_by(Timer.name))]


def _timer_id(s: Any, name: str) -> int:
    tid = s.scalar(select(Timer.id).where(Timer.name == name))
    if tid is None:
        raise NotFound(f"no timer named {name!r}")
    return int(tid)


def delete_timer(db: StateDB, name: str) -> None:
    with db.session() as s:
        tid = _timer_id(s, name)
        s.execute(delete(TimerFire).where(TimerFire.timer_id == tid))
        s.execute(delete(Timer).where(Timer.id == tid))


def set_enabled(db: StateDB, name: str, enabled: bool) -> dict[str, Any]:
    """Enable (from now on: no catch-up of what passed while disabled) or disable."""
    with db.session() as s:
        tid = _timer_id(s, name)
        row = s.get(Timer, tid)
        assert row is not None
        if enabled and not row.enabled:
            row.next_fire_at = next_due(row.cron, utcnow())
        row.enabled = enabled
        return _view(row, db)


def due_timers(db: StateDB, now: datetime) -> list[dict[str, Any]]:
    """Enabled timers due at *now*, with their id and raw due time."""
    query = select(Timer).where(Timer.enabled.is_(True), Timer.next_fire_at <= now)
    with db.session() as s:
        return [
            {**_view(t, db, raw=True), "id": t.id, "due_at": t.next_fire_at}
            for t in s.scalars(query.order_by(Timer.next_fire_at))
        ]


def claim(db: StateDB, timer_id: int, due_at: datetime, next_at: datetime) -> bool:
    """Move the timer from *due_at* to *next_at*; True for the one caller that did."""
    with db.session() as s:
        done = s.execute(
            update(Timer)
            .where(Timer.id == timer_id, Timer.next_fire_at == due_at)
            .values(next_fire_at=next_at)
        )
        return bool(getattr(done, "rowcount", 0))


def record_fire(db: StateDB, timer_id: int, due_at: datetime, outcome: str, detail: str) -> None:
    with db.session() as s:
        s.add(
            TimerFire(
                timer_id=timer_id,
                due_at=due_at,
                fired_at=None if outcome == "missed" else utcnow(),
                outcome=outcome,
                detail=detail,
            )
        )


def list_fires(db: StateDB, name: str, *, limit: int = 100) -> list[dict[str, Any]]:
    with db.session() as s:
        tid = _timer_id(s, name)
        query = (
            select(TimerFire)
            .where(TimerFire.timer_id == tid)
            .order_by(TimerFire.due_at.desc(), TimerFire.id.desc())
            .limit(limit)
        )
        return [
            {
                "due_at": iso(f.due_at),
                "fired_at": iso(f.fired_at),
                "outcome": f.outcome,
                "detail": f.detail,
            }
            for f in s.scalars(query)
        ]
