"""The state DB's tables (SQLAlchemy 2 typed mappings). Every change here is an Alembic
migration in ``migrations/versions``. Times are naive UTC datetimes."""

from __future__ import annotations

import re
from datetime import datetime

from sqlalchemy import (
    Boolean,
    DateTime,
    Float,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from crawlfleet.exceptions import ConfigError
from crawlfleet.state.records import utcnow

__all__ = [
    "Alert",
    "AlertRule",
    "Base",
    "Campaign",
    "CampaignUnit",
    "CrawlError",
    "Delivery",
    "Event",
    "Process",
    "Run",
    "ScrapydNode",
    "Session",
    "Timer",
    "TimerFire",
    "Token",
    "check_name",
    "iso",
    "utcnow",
]


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_name(kind: str, name: str) -> str:
    """*name* if it can name a *kind* (a Scrapyd, timer, alert rule): 1-64 letters,
    digits, ``. _ -``; else ConfigError naming it."""
    if not _NAME.match(name):
        raise ConfigError(f"{kind} name {name!r} is not valid: 1-64 letters, digits, . _ -")
    return name


def iso(value: datetime | None) -> str | None:
    """A state-DB time (naive UTC) as served: ISO 8601 to the second, with Z."""
    return None if value is None else value.isoformat(timespec="seconds") + "Z"


class Base(DeclarativeBase):
    pass


class Token(Base):
    """An API token: only its SHA-256 is kept. A name is used by one active token at a
    time; a revoked token stays listed (with ``revoked_at``) for the audit."""

    __tablename__ = "crawlfleet_tokens"
    __table_args__ = (UniqueConstraint("token_hash", name="uq_crawlfleet_tokens_token_hash"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), index=True)
    role: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class Event(Base):
    """One change made through the manager: who (a token's name), what, on which job,
    and its details as JSON (never a secret)."""

    __tablename__ = "crawlfleet_events"
    __table_args__ = (Index("ix_crawlfleet_events_job_at", "job", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime, index=True)
    actor: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(64))
    job: Mapped[str | None] = mapped_column(String(200), nullable=True)
    detail: Mapped[str] = mapped_column(Text, default="{}")


class Run(Base):
    """One run of a job: from the first live node to the moment none is left. Made by
    the manager that sees it first: ``open_job`` (the job while the run is open, NULL
    once closed) is unique, so a job has one open run however many managers watch."""

    __tablename__ = "crawlfleet_runs"
    __table_args__ = (
        UniqueConstraint("open_job", name="uq_crawlfleet_runs_open_job"),
        Index("ix_crawlfleet_runs_job_started", "job", "started_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job: Mapped[str] = mapped_column(String(200))
    open_job: Mapped[str | None] = mapped_column(String(200), nullable=True)
    #: running, finished (no work left), stopped (nodes left with work queued),
    #: lost (nodes stopped heartbeating)
    state: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[datetime] = mapped_column(DateTime)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    #: who started it: a token's name, or "observed" (nodes started outside the manager)
    started_by: Mapped[str] = mapped_column(String(64))
    #: most nodes seen alive at once
    nodes_max: Mapped[int] = mapped_column(Integer, default=0)
    #: figures at the close (JSON): pages, items per store, errors, rate
    figures: Mapped[str] = mapped_column(Text, default="{}")


class ScrapydNode(Base):
    """A Scrapyd the manager deploys to and starts nodes on. Its password is kept to call
    it and never served back."""

    __tablename__ = "crawlfleet_scrapyd"
    __table_args__ = (UniqueConstraint("name", name="uq_crawlfleet_scrapyd_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    url: Mapped[str] = mapped_column(String(500))
    username: Mapped[str | None] = mapped_column(String(200), nullable=True)
    #: sealed (crawlfleet.state.sealing)
    password: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)


class Process(Base):
    """A crawlfleet node started through Scrapyd's schedule.json for a job."""

    __tablename__ = "crawlfleet_processes"
    __table_args__ = (Index("ix_crawlfleet_processes_job", "job", "started_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job: Mapped[str] = mapped_column(String(200))
    scrapyd: Mapped[str] = mapped_column(String(64))
    project: Mapped[str] = mapped_column(String(200))
    spider: Mapped[str] = mapped_column(String(200))
    #: Scrapyd's job id
    scrapyd_job: Mapped[str] = mapped_column(String(64))
    #: pending, running, finished, cancelled, cancel_failed, lost
    state: Mapped[str] = mapped_column(String(16))
    started_by: Mapped[str] = mapped_column(String(64))
    started_at: Mapped[datetime] = mapped_column(DateTime)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    #: what happened last (a cancel's course, why it is lost)
    note: Mapped[str] = mapped_column(Text, default="")


class Timer(Base):
    """A cron expression that starts, pauses, resumes, drains or stops a job. Whoever
    moves ``next_fire_at`` from the due time to the next one (a compare-and-set) fires
    it: once, however many managers run."""

    __tablename__ = "crawlfleet_timers"
    __table_args__ = (UniqueConstraint("name", name="uq_crawlfleet_timers_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    job: Mapped[str] = mapped_column(String(200))
    #: run, pause, resume, drain, stop
    action: Mapped[str] = mapped_column(String(16))
    cron: Mapped[str] = mapped_column(String(200))
    #: the run's parameters (JSON, sealed: crawlfleet.state.sealing), as
    #: POST /api/v1/jobs/{job}/run takes them
    params: Mapped[str] = mapped_column(Text, default="{}")
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime)
    next_fire_at: Mapped[datetime] = mapped_column(DateTime, index=True)


class TimerFire(Base):
    """One due time of a timer: fired (ok or not, with what happened) or missed."""

    __tablename__ = "crawlfleet_timer_fires"
    __table_args__ = (Index("ix_crawlfleet_timer_fires_timer", "timer_id", "due_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    timer_id: Mapped[int] = mapped_column(Integer)
    due_at: Mapped[datetime] = mapped_column(DateTime)
    fired_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    #: fired, failed, missed
    outcome: Mapped[str] = mapped_column(String(16))
    detail: Mapped[str] = mapped_column(Text, default="")


class AlertRule(Base):
    """metric + operator + threshold + duration, on one job or every job, delivered to a
    webhook signed with *secret*. The webhook URL (it often holds a token) and the
    secret are never served back."""

    __tablename__ = "crawlfleet_alert_rules"
    __table_args__ = (UniqueConstraint("name", name="uq_crawlfleet_alert_rules_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    job: Mapped[str | None] = mapped_column(String(200), nullable=True)
    metric: Mapped[str] = mapped_column(String(64))
    op: Mapped[str] = mapped_column(String(2))
    threshold: Mapped[float] = mapped_column(Float)
    for_seconds: Mapped[float] = mapped_column(Float)
    #: both sealed (crawlfleet.state.sealing)
    webhook_url: Mapped[str] = mapped_column(Text)
    secret: Mapped[str] = mapped_column(Text)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime)


class Alert(Base):
    """A rule's condition holding for a job: pending (not yet for long enough), firing,
    then resolved. ``open_key`` ("rule:job" while not resolved) is unique: one open alert
    per rule and job however many managers evaluate."""

    __tablename__ = "crawlfleet_alerts"
    __table_args__ = (
        UniqueConstraint("open_key", name="uq_crawlfleet_alerts_open_key"),
        Index("ix_crawlfleet_alerts_rule", "rule_id", "since"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    rule_id: Mapped[int] = mapped_column(Integer)
    job: Mapped[str] = mapped_column(String(200))
    open_key: Mapped[str | None] = mapped_column(String(300), nullable=True)
    #: pending, firing, resolved
    status: Mapped[str] = mapped_column(String(16))
    since: Mapped[datetime] = mapped_column(DateTime)
    fired_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    resolved_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    value: Mapped[float] = mapped_column(Float)


class Delivery(Base):
    """One attempt to deliver an alert's change to its webhook."""

    __tablename__ = "crawlfleet_deliveries"
    __table_args__ = (Index("ix_crawlfleet_deliveries_alert", "alert_id", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    alert_id: Mapped[int] = mapped_column(Integer)
    #: firing or resolved
    event: Mapped[str] = mapped_column(String(16))
    attempt: Mapped[int] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(DateTime)
    ok: Mapped[bool] = mapped_column(Boolean)
    http_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    error: Mapped[str] = mapped_column(Text, default="")


class Session(Base):
    """A dashboard sign-in: a token typed at ``/`` gives a session cookie, of which only
    the SHA-256 is kept. It ends at ``expires_at``, at sign-out, or when its token is
    revoked. ``csrf`` must come back in a header with every change made through it."""

    __tablename__ = "crawlfleet_sessions"
    __table_args__ = (UniqueConstraint("session_hash", name="uq_crawlfleet_sessions_hash"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_hash: Mapped[str] = mapped_column(String(64))
    token_id: Mapped[int] = mapped_column(Integer, index=True)
    csrf: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime)
    expires_at: Mapped[datetime] = mapped_column(DateTime, index=True)


#: The error registry's large columns: up to 16 MiB on MariaDB too (MEDIUMTEXT and
#: MEDIUMBLOB; its TEXT and BLOB hold 64 KiB), TEXT and BYTEA on PostgreSQL.
BIG_TEXT = Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")
BIG_BINARY = LargeBinary().with_variant(mysql.MEDIUMBLOB(), "mysql", "mariadb")


class CrawlError(Base):
    """A request that failed for good on a node (its retries spent): one row per job and
    request fingerprint, counted again each time it fails. ``state``: ``open``,
    ``queued`` (put back into the frontier by a re-crawl) or ``resolved`` (a re-crawl
    succeeded). ``payload`` is the request as the frontier stores it, so that a
    re-crawl sends the very same request (callback, meta, headers)."""

    __tablename__ = "crawlfleet_errors"
    __table_args__ = (
        UniqueConstraint("job", "fingerprint", name="uq_crawlfleet_errors_job_fp"),
        Index("ix_crawlfleet_errors_job_state", "job", "state", "reason"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job: Mapped[str] = mapped_column(String(200))
    fingerprint: Mapped[str] = mapped_column(String(64))
    url: Mapped[str] = mapped_column(Text)
    site: Mapped[str] = mapped_column(String(255))
    #: the campaign unit the request belongs to, if any
    unit: Mapped[str | None] = mapped_column(String(200), nullable=True)
    #: http, exception, parse, item, invalid, ban
    reason: Mapped[str] = mapped_column(String(16))
    #: one line: "HTTP 503", "TimeoutError: ...", "ValueError: ..."
    detail: Mapped[str] = mapped_column(String(500))
    http_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    #: failures seen (each after the node's own retries)
    failures: Mapped[int] = mapped_column(Integer)
    #: download attempts of the last failure (retries included)
    attempts: Mapped[int] = mapped_column(Integer)
    recrawls: Mapped[int] = mapped_column(Integer)
    first_seen: Mapped[datetime] = mapped_column(DateTime)
    last_seen: Mapped[datetime] = mapped_column(DateTime)
    node: Mapped[str] = mapped_column(String(100))
    stack: Mapped[str | None] = mapped_column(BIG_TEXT, nullable=True)
    state: Mapped[str] = mapped_column(String(16))
    resolved_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    payload: Mapped[bytes | None] = mapped_column(BIG_BINARY, nullable=True)


class Campaign(Base):
    """A campaign: a job crawled over a parameter space of task units (see
    :mod:`crawlfleet.campaigns.space`), fed to the job's frontier by its nodes as they
    need work. ``next_unit`` (the cursor) is the index of the next unit never handed
    out; ``state``:
    ``running``, ``paused``, ``stopping`` (nothing more is fed; what is queued is
    finished), ``stopped``, ``finished``."""

    __tablename__ = "crawlfleet_campaigns"
    __table_args__ = (UniqueConstraint("name", name="uq_crawlfleet_campaigns_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    job: Mapped[str] = mapped_column(String(200))
    #: what the nodes run (a spider name or a spec file), as told at creation
    spider: Mapped[str] = mapped_column(String(500))
    #: the start URL template of a unit ("" when the spider's unit_requests makes them)
    template: Mapped[str] = mapped_column(Text)
    #: the parameter space (JSON, ParamSpace.as_dict)
    params: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(16))
    next_unit: Mapped[int] = mapped_column(Integer, default=0)
    total: Mapped[int] = mapped_column(Integer)
    #: most times a unit is fed (its first time and its re-crawls)
    max_attempts: Mapped[int] = mapped_column(Integer)
    #: units fed and not finished at most, for the whole fleet
    units_ahead: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    updated_at: Mapped[datetime] = mapped_column(DateTime)
    started_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class CampaignUnit(Base):
    """A unit handed out: ``leased`` (a node is feeding it, until ``lease_until``),
    ``fed`` (its start requests are in the frontier), ``done`` (its first page was
    crawled), ``failed`` (its first page failed for good), ``pending`` (to feed again:
    a re-crawl). A unit's row exists from the moment the cursor passes it."""

    __tablename__ = "crawlfleet_campaign_units"
    __table_args__ = (
        UniqueConstraint("campaign_id", "idx", name="uq_crawlfleet_units_campaign_idx"),
        Index("ix_crawlfleet_units_campaign_state", "campaign_id", "state"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    campaign_id: Mapped[int] = mapped_column(Integer)
    idx: Mapped[int] = mapped_column(Integer)
    label: Mapped[str] = mapped_column(String(200))
    state: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    node: Mapped[str | None] = mapped_column(String(100), nullable=True)
    lease_until: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    fed_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    #: why it failed (one line)
    error: Mapped[str | None] = mapped_column(String(500), nullable=True)
