"""Campaigns in the state DB: flow control for long crawls over task units.

A campaign names a job, a URL template (or a spider's ``unit_requests`` hook) and a
parameter space (:class:`~crawlfleet.campaigns.space.ParamSpace`). Its nodes (any number,
stateless) call :func:`claim_units` as they need work: in one transaction it takes units
to feed again (``pending``, or ``leased`` by a node that did not finish feeding them in
time) and moves the cursor (``next_unit``) past new ones, creating their rows as
``leased`` by that node; so a crash never skips a unit, and two nodes never get the
same one. The node queues each unit's start requests in the job's frontier, whose
seen-filter drops them if a node that died had queued them already, then marks them
``fed`` (:func:`mark_fed`). A unit is ``done`` when its first request is crawled, or
``failed`` when that request fails for good (:func:`finish_unit`).

At most ``units_ahead`` units are leased or fed at once, fleet-wide. When every unit
was handed out and the job's frontier is empty, :func:`wrap_up` starts a re-crawl round
(failed units with attempts left are ``pending`` again) or ends the campaign
(``finished``, or ``stopped`` after a stop). States: ``running``, ``paused``,
``stopping`` (nothing more is fed; what is queued is crawled), ``stopped``, ``finished``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import func, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from crawlfleet.campaigns.space import ParamSpace, Unit, check_template
from crawlfleet.exceptions import ConfigError, NotFound
from crawlfleet.state.db import StateDB
from crawlfleet.state.errors import _conflict
from crawlfleet.state.models import Campaign, CampaignUnit, check_name, iso, utcnow

__all__ = [
    "ACTIVE",
    "STATES",
    "UNIT_STATES",
    "campaign_status",
    "check_command",
    "claim_units",
    "create_campaign",
    "extend_campaign",
    "finish_unit",
    "get_campaign",
    "list_campaigns",
    "mark_fed",
    "set_campaign_state",
    "settle_fed",
    "wrap_up",
]

logger = logging.getLogger(__name__)

STATES = ("running", "paused", "stopping", "stopped", "finished")
#: States in which nodes keep the campaign's job open.
ACTIVE = ("running", "paused", "stopping")
UNIT_STATES = ("pending", "leased", "fed", "done", "failed")
#: A rate is measured over the units finished in this window.
RATE_WINDOW = timedelta(minutes=5)

T = TypeVar("T")


def _retrying(fn: Callable[[], T]) -> T:
    for attempt in range(5):
        try:
            return fn()
        except OperationalError as exc:
            if attempt == 4 or not _conflict(exc):
                raise
    raise AssertionError("unreachable")


def _lock(s: Session, name: str) -> Campaign:
    """The campaign *name*, its row locked for this transaction (an UPDATE first: on
    SQLite it takes the write lock at once, so that no other writer slips in between)."""
    s.execute(update(Campaign).where(Campaign.name == name).values(updated_at=utcnow()))
    row = s.scalars(select(Campaign).where(Campaign.name == name).with_for_update()).first()
    if row is None:
        raise NotFound(f"unknown campaign {name!r} (crawlfleet campaign list)")
    return row


def _count(s: Session, row: Campaign, *where: Any) -> int:
    """How many units of campaign *row* match *where*."""
    query = select(func.count()).select_from(CampaignUnit)
    return int(s.scalar(query.where(CampaignUnit.campaign_id == row.id, *where)) or 0)


def space_of(row: Campaign) -> ParamSpace:
    return ParamSpace.from_dict(json.loads(row.params))


# -- operators ------------------------------------------------------------------------
def create_campaign(
    db: StateDB,
    name: str,
    *,
    job: str,
    space: ParamSpace,
    template: str = "",
    spider: str = "",
    max_attempts: int = 3,
    units_ahead: int = 20,
) -> dict[str, Any]:
    """A new campaign (``running``); ConfigError naming what is wrong."""
    check_name("campaign", name)
    if not job or len(job) > 200:
        raise ConfigError(f"job name must be 1-200 characters, got {job!r}")
    if template:
        try:
            check_template(template, space)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if not 1 <= max_attempts <= 100:
        raise ConfigError(f"max attempts must be 1-100, got {max_attempts}")
    if not 1 <= units_ahead <= 100_000:
        raise ConfigError(f"units ahead must be 1-100000, got {units_ahead}")
    now = utcnow()
    with db.session() as s:
        if s.scalars(select(Campaign.id).where(Campaign.name == name)).first() is not None:
            raise ConfigError(f"campaign {name!r} exists already")
        row = Campaign(
            name=name,
            job=job,
            spider=spider[:500],
            template=template,
            params=json.dumps(space.as_dict()),
            state="running",
            next_unit=0,
            total=space.size(),
            max_attempts=max_attempts,
            units_ahead=units_ahead,
            created_at=now,
            updated_at=now,
        )
        s.add(row)
        s.flush()
        return _describe(s, row)


def get_campaign(db: StateDB, name: str) -> dict[str, Any]:
    """The campaign *name* with its progress (:func:`campaign_status`)."""
    return campaign_status(db, name)


def list_campaigns(db: StateDB) -> list[dict[str, Any]]:
    with db.session() as s:
        rows = list(s.scalars(select(Campaign).order_by(Campaign.created_at, Campaign.id)))
        return [_describe(s, row) for row in rows]


#: operator command -> (states it applies to, state it sets)
TRANSITIONS = {
    "pause": (("running",), "paused"),
    "resume": (("paused",), "running"),
    "stop": (("running", "paused"), "stopping"),
}


def check_command(name: str, state: str, command: str) -> None:
    """ConfigError unless *command* (pause, resume, stop) applies to a campaign in
    *state* (a command that is done already applies: it changes nothing)."""
    allowed, target = TRANSITIONS[command]
    if state != target and state not in allowed:
        raise ConfigError(f"campaign {name!r} is {state}: cannot {command} it")


def set_campaign_state(db: StateDB, name: str, command: str) -> dict[str, Any]:
    """Apply *command* (pause, resume, stop); ConfigError when it does not apply."""
    target = TRANSITIONS[command][1]

    def run() -> dict[str, Any]:
        with db.session() as s:
            row = _lock(s, name)
            check_command(name, row.state, command)
            row.state = target
            return _describe(s, row)

    return _retrying(run)


def extend_campaign(db: StateDB, name: str, date_to: str) -> dict[str, Any]:
    """Move the campaign's end date later (new units come after every existing one); a
    finished campaign runs again."""
    try:
        end = datetime.fromisoformat(date_to).date()
    except ValueError:
        raise ConfigError(f"the new end must be a date like 2026-01-31, got {date_to!r}") from None

    def run() -> dict[str, Any]:
        with db.session() as s:
            row = _lock(s, name)
            try:
                space = space_of(row).extended(end)
            except ValueError as exc:
                raise ConfigError(f"campaign {name!r}: {exc}") from None
            row.params = json.dumps(space.as_dict())
            row.total = space.size()
            if row.state == "finished" and row.next_unit < row.total:
                row.state, row.finished_at = "running", None
            return _describe(s, row)

    return _retrying(run)


# -- nodes ----------------------------------------------------------------------------
Claimed = tuple[int, Unit, bool]


def claim_units(
    db: StateDB, name: str, node: str, *, most: int, lease_seconds: float
) -> tuple[dict[str, Any], list[Claimed]]:
    """Units for *node* to feed now (at most *most*, and only while fewer than the
    campaign's ``units_ahead`` are leased or fed): ``(campaign, [(unit id, unit,
    again)])``, *again* when the unit is fed once more after it failed (a re-crawl:
    its requests must bypass the seen-filter); none unless the campaign is running.
    ``campaign``: its state, template, job, max_attempts, and ``exhausted`` (every unit
    was handed out, none waits to be fed again)."""

    def run() -> tuple[dict[str, Any], list[Claimed]]:
        now = utcnow()
        with db.session() as s:
            row = _lock(s, name)
            info: dict[str, Any] = {
                "state": row.state,
                "template": row.template,
                "job": row.job,
                "max_attempts": row.max_attempts,
                "exhausted": False,
            }
            if row.state != "running":
                return info, []
            if row.next_unit >= row.total and not _count(
                s, row, CampaignUnit.state.in_(("pending", "leased"))
            ):
                info["exhausted"] = True
                return info, []
            busy = _count(
                s,
                row,
                (CampaignUnit.state == "fed")
                | ((CampaignUnit.state == "leased") & (CampaignUnit.lease_until >= now)),
            )
            want = min(most, row.units_ahead - busy)
            if want <= 0:
                return info, []
            space = space_of(row)
            lease_until = now + timedelta(seconds=lease_seconds)
            again = list(
                s.scalars(
                    select(CampaignUnit)
                    .where(
                        CampaignUnit.campaign_id == row.id,
                        (CampaignUnit.state == "pending")
                        | ((CampaignUnit.state == "leased") & (CampaignUnit.lease_until < now)),
                    )
                    .order_by(CampaignUnit.idx)
                    .limit(want)
                    .with_for_update()
                )
            )
            out: list[Claimed] = []
            for unit in again:
                # fed again after it failed (pending, or its re-feed's lease lapsed): its
                # pages were seen, so its requests must pass the seen-filter
                retry = unit.state == "pending" or unit.error is not None
                out.append((unit.id, space.unit(unit.idx), retry))
                unit.state, unit.node, unit.lease_until = "leased", node, lease_until
                unit.attempts += 1
            new = min(want - len(again), row.total - row.next_unit)
            fresh = []
            for idx in range(row.next_unit, row.next_unit + max(new, 0)):
                fresh.append(
                    CampaignUnit(
                        campaign_id=row.id,
                        idx=idx,
                        label=space.unit(idx).label[:200],
                        state="leased",
                        attempts=1,
                        node=node,
                        lease_until=lease_until,
                    )
                )
            if fresh:
                s.add_all(fresh)
                row.next_unit += len(fresh)
                if row.started_at is None:
                    row.started_at = now
                s.flush()
                out += [(u.id, space.unit(u.idx), False) for u in fresh]
            return info, out

    return _retrying(run)


def mark_fed(db: StateDB, node: str, unit_ids: Sequence[int]) -> int:
    """*node* queued the start requests of *unit_ids*; how many were still its own."""
    if not unit_ids:
        return 0
    with db.session() as s:
        result = s.execute(
            update(CampaignUnit)
            .where(
                CampaignUnit.id.in_(list(unit_ids)),
                CampaignUnit.state == "leased",
                CampaignUnit.node == node,
            )
            .values(state="fed", fed_at=utcnow(), lease_until=None)
        )
        return int(getattr(result, "rowcount", 0) or 0)


def finish_unit(db: StateDB, unit_id: int, *, ok: bool, error: str | None = None) -> bool:
    """The first request of unit *unit_id* was crawled (*ok*: also a unit that had
    failed, its first page re-crawled as a failed link) or failed for good."""
    states = ("leased", "fed", "failed", "pending") if ok else ("leased", "fed")
    with db.session() as s:
        result = s.execute(
            update(CampaignUnit)
            .where(CampaignUnit.id == unit_id, CampaignUnit.state.in_(states))
            .values(
                state="done" if ok else "failed",
                finished_at=utcnow(),
                error=None if ok else (error or "failed")[:500],
                lease_until=None,
            )
        )
        return bool(getattr(result, "rowcount", 0))


def settle_fed(db: StateDB, name: str, *, older_than: float) -> int:
    """Units ``fed`` more than *older_than* seconds ago are ``done``: the caller saw the
    job's frontier empty for that long, so their pages were crawled, and their first
    page's report was lost (a node killed), or never came (a unit whose first request
    the seen-filter dropped, or robots.txt refused). How many."""
    cutoff = utcnow() - timedelta(seconds=older_than)
    with db.session() as s:
        campaign = s.scalars(select(Campaign.id).where(Campaign.name == name)).first()
        if campaign is None:
            return 0
        result = s.execute(
            update(CampaignUnit)
            .where(
                CampaignUnit.campaign_id == campaign,
                CampaignUnit.state == "fed",
                CampaignUnit.fed_at < cutoff,
            )
            .values(state="done", finished_at=utcnow())
        )
        return int(getattr(result, "rowcount", 0) or 0)


def wrap_up(db: StateDB, name: str) -> str:
    """Called by a node that found nothing to claim and the job's frontier empty. If
    every unit was handed out and none is being fed: units still ``fed`` are ``done``
    (the frontier crawled their pages; only their first page's report was lost with a
    node), failed units with attempts left become ``pending`` (a re-crawl round), and
    with none, the campaign ends. Returns what happened: ``"wait"`` (units are still
    being handed out or fed), ``"recrawl"``, ``"finished"``, ``"stopped"`` or its
    state (nothing to do)."""

    def run() -> str:
        with db.session() as s:
            row = _lock(s, name)
            if row.state not in ("running", "stopping"):
                return row.state
            if row.state == "running" and row.next_unit < row.total:
                return "wait"
            units = CampaignUnit.campaign_id == row.id
            leased = _count(s, row, CampaignUnit.state.in_(("leased", "pending")))
            if leased and row.state == "running":
                return "wait"
            s.execute(
                update(CampaignUnit)
                .where(units, CampaignUnit.state == "fed")
                .values(state="done", finished_at=utcnow())
            )
            if row.state == "running":
                again = s.execute(
                    update(CampaignUnit)
                    .where(
                        units,
                        CampaignUnit.state == "failed",
                        CampaignUnit.attempts < row.max_attempts,
                    )
                    .values(state="pending")
                )
                if getattr(again, "rowcount", 0):
                    return "recrawl"
            row.state = "finished" if row.state == "running" else "stopped"
            row.finished_at = utcnow()
            return row.state

    return _retrying(run)


# -- reading ----------------------------------------------------------------------------
def campaign_status(db: StateDB, name: str, *, failed_units: bool = True) -> dict[str, Any]:
    """The campaign *name*: its units by state, progress, rate (units/min over
    RATE_WINDOW), ETA and (*failed_units*) its first failed units."""
    with db.session() as s:
        row = s.scalars(select(Campaign).where(Campaign.name == name)).first()
        if row is None:
            raise NotFound(f"unknown campaign {name!r} (crawlfleet campaign list)")
        return _describe(s, row, failed_units=failed_units)


def _describe(s: Session, row: Campaign, *, failed_units: bool = False) -> dict[str, Any]:
    counts = dict.fromkeys(UNIT_STATES, 0)
    for state, n in s.execute(
        select(CampaignUnit.state, func.count())
        .where(CampaignUnit.campaign_id == row.id)
        .group_by(CampaignUnit.state)
    ):
        counts[state] = int(n)
    now = utcnow()
    recent = _count(s, row, CampaignUnit.finished_at >= now - RATE_WINDOW)
    started = row.started_at
    window = RATE_WINDOW.total_seconds()
    if started is not None:
        window = max(1.0, min(window, (now - started).total_seconds()))
    rate = recent / window * 60 if started is not None else 0.0  # units per minute
    remaining = row.total - counts["done"] - counts["failed"]
    eta = None
    if row.state == "running" and rate > 0 and remaining > 0:
        eta = remaining / rate * 60
    out: dict[str, Any] = {
        "name": row.name,
        "job": row.job,
        "spider": row.spider,
        "template": row.template,
        "params": json.loads(row.params),
        "state": row.state,
        "total": row.total,
        "cursor": row.next_unit,
        "units": counts,
        "progress": (counts["done"] + counts["failed"]) / row.total if row.total else 1.0,
        "rate_per_min": round(rate, 2),
        "eta_seconds": None if eta is None else round(eta),
        "max_attempts": row.max_attempts,
        "units_ahead": row.units_ahead,
        "created_at": iso(row.created_at),
        "started_at": iso(row.started_at),
        "finished_at": iso(row.finished_at),
    }
    if failed_units:
        out["failed"] = [
            {"unit": u.label, "attempts": u.attempts, "error": u.error}
            for u in s.scalars(
                select(CampaignUnit)
                .where(CampaignUnit.campaign_id == row.id, CampaignUnit.state == "failed")
                .order_by(CampaignUnit.idx)
                .limit(100)
            )
        ]
    return out
