"""Scrapyd nodes registered with the manager, and the crawlfleet nodes (processes) it
started on them. Passwords are kept to call Scrapyd, never listed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy import delete, select, update

from crawlfleet.exceptions import ConfigError, NotFound
from crawlfleet.state.db import StateDB
from crawlfleet.state.models import Process, ScrapydNode, check_name, iso, utcnow

__all__ = [
    "ACTIVE",
    "ScrapydInfo",
    "add_scrapyd",
    "get_process",
    "list_processes",
    "list_scrapyd",
    "record_process",
    "remove_scrapyd",
    "scrapyd_url",
    "set_process_state",
]

#: Process states that may still change.
ACTIVE = ("pending", "running")


@dataclass(frozen=True)
class ScrapydInfo:
    name: str
    url: str  #: without credentials
    username: str | None
    password: str | None  #: for calls only: never shown

    def public(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url, "auth": self.username is not None}


def scrapyd_url(url: str) -> tuple[str, str | None, str | None]:
    """(URL without credentials, username, password) of a Scrapyd's URL; ConfigError
    unless it is http(s)://host[:port][/path] (never echoing its credentials)."""
    text = url.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or any(not c.isprintable() or c.isspace() for c in text)
    ):
        raise ConfigError("Scrapyd URL must be http(s)://host:port (printable, no spaces)")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = f"{host}:{port}" if port else host
    clean = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
    return clean, parts.username, parts.password


def add_scrapyd(
    db: StateDB, name: str, url: str, username: str | None = None, password: str | None = None
) -> ScrapydInfo:
    """Register a Scrapyd; credentials in the URL are moved to username/password.
    ConfigError for a bad name or URL, or a name already registered."""
    check_name("Scrapyd", name)
    clean, url_user, url_password = scrapyd_url(url)
    if url_user is not None:
        username, password = username or url_user, password or url_password
    node = ScrapydNode(
        name=name,
        url=clean,
        username=username,
        password=db.secrets.seal_optional(password),
        created_at=utcnow(),
    )
    if not db.add_new(node):
        raise ConfigError(f"a Scrapyd is already named {name!r}")
    return ScrapydInfo(name, clean, username, password)


def list_scrapyd(db: StateDB) -> list[ScrapydInfo]:
    with db.session() as s:
        return [
            ScrapydInfo(n.name, n.url, n.username, db.secrets.unseal_optional(n.password))
            for n in s.scalars(select(ScrapydNode).order_by(ScrapydNode.name))
        ]


def remove_scrapyd(db: StateDB, name: str) -> None:
    """ConfigError if no Scrapyd has that name."""
    with db.session() as s:
        gone = s.execute(delete(ScrapydNode).where(ScrapydNode.name == name))
        if not getattr(gone, "rowcount", 0):
            raise NotFound(f"no Scrapyd named {name!r}")


def record_process(
    db: StateDB, job: str, scrapyd: str, project: str, spider: str, scrapyd_job: str, actor: str
) -> int:
    """Keep a process just scheduled; returns its id."""
    with db.session() as s:
        row = Process(
            job=job,
            scrapyd=scrapyd,
            project=project,
            spider=spider,
            scrapyd_job=scrapyd_job,
            state="pending",
            started_by=actor,
            started_at=utcnow(),
            note="",
        )
        s.add(row)
        s.flush()
        return row.id


def set_process_state(
    db: StateDB, pid: int, state: str, note: str | None = None, *, if_active: bool = False
) -> None:
    """Move a process to *state* (finished_at set once it is no longer active). With
    *if_active*, only a process still pending or running moves: what the manager's watch
    saw from Scrapyd never overwrites an end recorded meanwhile (a cancel's, with its
    note)."""
    values: dict[str, Any] = {"state": state}
    if state not in ACTIVE:
        values["finished_at"] = utcnow()
    if note is not None:
        values["note"] = note
    where = [Process.id == pid]
    if if_active:
        where.append(Process.state.in_(ACTIVE))
    with db.session() as s:
        s.execute(update(Process).where(*where).values(**values))


def _process(p: Process) -> dict[str, Any]:
    return {
        "id": p.id,
        "job": p.job,
        "scrapyd": p.scrapyd,
        "project": p.project,
        "spider": p.spider,
        "scrapyd_job": p.scrapyd_job,
        "state": p.state,
        "started_by": p.started_by,
        "started_at": iso(p.started_at),
        "finished_at": iso(p.finished_at),
        "note": p.note,
    }


def list_processes(
    db: StateDB, job: str | None = None, *, active: bool = False, limit: int = 200
) -> list[dict[str, Any]]:
    """Processes newest first (of *job*; only pending or running ones with *active*)."""
    query = select(Process).order_by(Process.started_at.desc(), Process.id.desc())
    if job is not None:
        query = query.where(Process.job == job)
    if active:
        query = query.where(Process.state.in_(ACTIVE))
    with db.session() as s:
        return [_process(p) for p in s.scalars(query.limit(limit))]


def get_process(db: StateDB, job: str, pid: int) -> dict[str, Any] | None:
    with db.session() as s:
        p = s.scalar(select(Process).where(Process.id == pid, Process.job == job))
        return None if p is None else _process(p)
