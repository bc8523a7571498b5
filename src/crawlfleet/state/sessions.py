"""Dashboard sessions: a token typed at the dashboard's sign-in buys a session id (the
cookie) and a CSRF token; only the id's SHA-256 is kept.

A session lasts ``hours`` from sign-in and ends at once at sign-out or when its token is
revoked. Expired rows are deleted when the next session is made.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, select

from crawlfleet.state.db import StateDB
from crawlfleet.state.models import Session, Token, utcnow
from crawlfleet.state.tokens import PREFIX, TokenInfo, digest, token_info

__all__ = ["SessionInfo", "end_session", "session_of", "start_session"]


@dataclass(frozen=True)
class SessionInfo:
    token: TokenInfo
    #: to be sent back in a header with every change (compared in constant time)
    csrf: str


def start_session(db: StateDB, token: str, hours: float) -> tuple[str, SessionInfo] | None:
    """``(session id, its info)`` for an active *token*, or None (unknown or revoked)."""
    if not token.startswith(PREFIX):
        return None
    now = utcnow()
    with db.session() as s:
        row = s.scalar(
            select(Token).where(Token.token_hash == digest(token), Token.revoked_at.is_(None))
        )
        if row is None:
            return None
        s.execute(delete(Session).where(Session.expires_at <= now))
        sid, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        s.add(
            Session(
                session_hash=digest(sid),
                token_id=row.id,
                csrf=csrf,
                created_at=now,
                expires_at=now + timedelta(hours=hours),
            )
        )
        row.last_used_at = now
        return sid, SessionInfo(token_info(row), csrf)


def session_of(db: StateDB, sid: str) -> SessionInfo | None:
    """The live session whose id is *sid* (not expired, its token not revoked), or None."""
    if not sid or len(sid) > 100:
        return None
    with db.session() as s:
        found = s.execute(
            select(Session, Token)
            .join(Token, Token.id == Session.token_id)
            .where(
                Session.session_hash == digest(sid),
                Session.expires_at > utcnow(),
                Token.revoked_at.is_(None),
            )
        ).first()
        if found is None:
            return None
        session, token = found
        return SessionInfo(token_info(token), session.csrf)


def end_session(db: StateDB, sid: str) -> None:
    """Delete the session *sid* (nothing if there is none)."""
    with db.session() as s:
        s.execute(delete(Session).where(Session.session_hash == digest(sid)))
