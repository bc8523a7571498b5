"""API tokens: created with a role, kept as their SHA-256 only, listed, revoked.

A token is ``cft_`` and 43 random URL-safe characters (256 bits); it is shown once, when
it is made. Roles, each allowed what the one before is: ``viewer`` (reads), ``operator``
(steers jobs and nodes: seeds, control, limits, reset), ``admin`` (everything).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select

from crawlfleet.exceptions import ConfigError, NotFound
from crawlfleet.state.db import StateDB
from crawlfleet.state.models import Token, iso, utcnow

__all__ = [
    "ROLES",
    "TokenInfo",
    "authenticate",
    "create_token",
    "digest",
    "list_tokens",
    "revoke_token",
    "role_allows",
    "token_info",
]

ROLES = ("viewer", "operator", "admin")
PREFIX = "cft_"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
#: ``last_used_at`` is written at most this often per token (not one write a request).
TOUCH_EVERY = timedelta(seconds=60)


@dataclass(frozen=True)
class TokenInfo:
    name: str
    role: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None

    def as_dict(self) -> dict[str, str | None]:
        return {
            "name": self.name,
            "role": self.role,
            "created_at": iso(self.created_at),
            "last_used_at": iso(self.last_used_at),
            "revoked_at": iso(self.revoked_at),
        }


def role_allows(role: str, needed: str) -> bool:
    """Whether a token of *role* may do what needs *needed*."""
    return ROLES.index(role) >= ROLES.index(needed)


def digest(token: str) -> str:
    """What the state DB keeps of a secret (a token, a session id): its SHA-256."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_info(row: Token) -> TokenInfo:
    """*row* as served (never its hash)."""
    return TokenInfo(row.name, row.role, row.created_at, row.last_used_at, row.revoked_at)


def create_token(db: StateDB, name: str, role: str) -> str:
    """A new token named *name* with *role*; returns the token (only its hash is kept).
    ConfigError for an unknown role, a name that is not 1-64 letters, digits or
    ``. _ @ -``, or a name an active token has."""
    if role not in ROLES:
        raise ConfigError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if not _NAME.match(name):
        raise ConfigError(
            f"token name {name!r} is not valid: 1 to 64 letters, digits, '.', '_', '@' or '-'"
        )
    token = PREFIX + secrets.token_urlsafe(32)
    with db.session() as s:
        taken = s.scalar(select(Token.id).where(Token.name == name, Token.revoked_at.is_(None)))
        if taken is not None:
            raise ConfigError(f"an active token is already named {name!r} (revoke it first)")
        s.add(Token(name=name, role=role, token_hash=digest(token), created_at=utcnow()))
    return token


def list_tokens(db: StateDB, *, revoked: bool = False) -> list[TokenInfo]:
    """Active tokens by name (and revoked ones too with *revoked*)."""
    query = select(Token).order_by(Token.name, Token.created_at)
    if not revoked:
        query = query.where(Token.revoked_at.is_(None))
    with db.session() as s:
        return [token_info(row) for row in s.scalars(query)]


def revoke_token(db: StateDB, name: str) -> None:
    """Revoke the active token named *name* (it stops working at once); ConfigError
    if there is none."""
    with db.session() as s:
        row = s.scalar(select(Token).where(Token.name == name, Token.revoked_at.is_(None)))
        if row is None:
            raise NotFound(f"no active token named {name!r}")
        row.revoked_at = utcnow()


def authenticate(db: StateDB, token: str) -> TokenInfo | None:
    """The active token *token* is, or None; notes its use (at most once a minute)."""
    if not token.startswith(PREFIX):
        return None
    with db.session() as s:
        row = s.scalar(
            select(Token).where(Token.token_hash == digest(token), Token.revoked_at.is_(None))
        )
        if row is None:
            return None
        now = utcnow()
        if row.last_used_at is None or now - row.last_used_at >= TOUCH_EVERY:
            row.last_used_at = now
        return token_info(row)
