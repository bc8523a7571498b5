"""Job runs as the manager sees them: opened when a job first has live nodes, closed
when none is left, once however many managers watch (see ``Run.open_job``)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import select, update

from crawlfleet.state.db import StateDB
from crawlfleet.state.models import Run, iso, utcnow

__all__ = ["close_run", "list_runs", "open_run", "open_run_start", "touch_run"]


def open_run(db: StateDB, job: str, *, nodes: int, started_by: str = "observed") -> bool:
    """Open a run of *job* unless one is open; True if this call opened it."""
    return db.add_new(  # False: another manager opened it first
        Run(
            job=job,
            open_job=job,
            state="running",
            started_at=utcnow(),
            started_by=started_by,
            nodes_max=nodes,
            figures="{}",
        )
    )


def touch_run(db: StateDB, job: str, *, nodes: int) -> None:
    """Note *nodes* live nodes in *job*'s open run (its ``nodes_max``)."""
    with db.session() as s:
        s.execute(
            update(Run).where(Run.open_job == job, Run.nodes_max < nodes).values(nodes_max=nodes)
        )


def close_run(db: StateDB, job: str, state: str, figures: dict[str, Any]) -> bool:
    """Close *job*'s open run as *state* with its *figures*; True if this call did."""
    with db.session() as s:
        done = s.execute(
            update(Run)
            .where(Run.open_job == job)
            .values(
                open_job=None,
                state=state,
                finished_at=utcnow(),
                figures=json.dumps(figures, sort_keys=True, default=str),
            )
        )
        return bool(getattr(done, "rowcount", 0))


def open_run_start(db: StateDB, job: str) -> datetime | None:
    """When *job*'s open run started (None: no run is open)."""
    with db.session() as s:
        return s.scalar(select(Run.started_at).where(Run.open_job == job))


def list_runs(db: StateDB, job: str, *, limit: int = 50) -> list[dict[str, Any]]:
    """*job*'s runs, newest first."""
    query = select(Run).where(Run.job == job).order_by(Run.started_at.desc(), Run.id.desc())
    with db.session() as s:
        return [
            {
                "id": r.id,
                "state": r.state,
                "started_at": iso(r.started_at),
                "finished_at": iso(r.finished_at),
                "started_by": r.started_by,
                "nodes_max": r.nodes_max,
                "figures": json.loads(r.figures),
            }
            for r in s.scalars(query.limit(limit))
        ]
