"""Secrets kept sealed at rest: those the state DB keeps (Scrapyd passwords, alert
webhook URLs (a path or query often holds a token) and signing secrets, and the
parameters of timers: a run's settings may hold a Redis URL with its password), and the
credentials of the proxy pool's URLs in Redis (crawlfleet.fleet.proxies).

A sealed value is ``sealed:v1:`` and a Fernet token (AES-128-CBC and HMAC-SHA256, from
the ``cryptography`` package). The keys come from ``CRAWLFLEET_SECRET_KEY`` (the
setting or the environment variable: Fernet keys, comma-separated; the first seals,
every one unseals), else from the key file ``secret.key`` under ``CRAWLFLEET_DATA_DIR``
(one key a line, the first sealing), made owner-only (0600, in a folder made 0700) the
first time a manager needs it. A value written before sealing existed is read as it is
and sealed by the next manager that starts (:func:`reseal`).

Whoever keeps a backup of the state DB keeps the key with it: without it, the sealed
values cannot be read (each must then be set again). ``crawlfleet manager key rotate``
seals everything again with a new key.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from scrapy.settings import BaseSettings
from sqlalchemy import select

from crawlfleet.exceptions import ConfigError
from crawlfleet.settings.access import get_path, get_str

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from sqlalchemy.orm import Session


class Sessions(Protocol):
    """What resealing needs of a state DB (crawlfleet.state.db.StateDB is one)."""

    def session(self) -> AbstractContextManager[Session]:
        """A session committed at the end of the block."""


__all__ = [
    "KEY_FILE",
    "PREFIX",
    "Sealer",
    "Sessions",
    "new_key",
    "reseal",
    "rotate",
    "sealed_columns",
]

logger = logging.getLogger(__name__)

PREFIX = "sealed:v1:"
KEY_FILE = "secret.key"
SETTING = "CRAWLFLEET_SECRET_KEY"


def new_key() -> str:
    """A fresh key, as CRAWLFLEET_SECRET_KEY and the key file hold them."""
    return Fernet.generate_key().decode()


def _fernet(text: str, where: str) -> Fernet:
    try:
        return Fernet(text.strip().encode())
    except (ValueError, TypeError):
        raise ConfigError(
            f"{where} holds something that is not a key (32 url-safe base64 bytes, as "
            "`crawlfleet manager key new` prints)"
        ) from None


@dataclass
class Sealer:
    """Seals and unseals with *keys* (the first seals). *source* says where they come
    from, in messages (never the keys themselves); *path* is the key file, if any."""

    keys: Sequence[str]
    source: str
    path: Path | None = None

    def __post_init__(self) -> None:
        self._fernets = [_fernet(k, self.source) for k in self.keys]

    @classmethod
    def from_settings(cls, settings: BaseSettings, *, create: bool = True) -> Sealer:
        """The keys of CRAWLFLEET_SECRET_KEY, else of the key file (made when missing and
        *create*). ConfigError naming the setting or the file when they are not keys."""
        configured = get_str(settings, SETTING)
        if configured.strip():
            keys = [k.strip() for k in configured.split(",") if k.strip()]
            return cls(keys, SETTING)
        path = get_path(settings, "CRAWLFLEET_DATA_DIR") / KEY_FILE
        if not path.exists():
            if not create:
                raise ConfigError(f"no key file {path} (and {SETTING} is empty)")
            _write_key_file(path, [new_key()], exclusive=True)
            logger.info(
                "made the key that seals the state DB's secrets and proxy credentials: %s (0600)",
                path,
            )
        return cls(_read_key_file(path), f"the key file {path}", path)

    def seal(self, value: str) -> str:
        """*value* sealed with the first key (a sealed value is returned as it is)."""
        if value.startswith(PREFIX):
            return value
        return PREFIX + self._fernets[0].encrypt(value.encode()).decode()

    def unseal(self, stored: str) -> str:
        """The value of *stored* (a value from before sealing is returned as it is);
        ConfigError if none of the keys opens it."""
        if not stored.startswith(PREFIX):
            return stored
        token = stored[len(PREFIX) :].encode()
        try:
            return MultiFernet(self._fernets).decrypt(token).decode()
        except InvalidToken:
            raise ConfigError(
                f"a secret in the state DB cannot be unsealed with {self.source}: it was "
                f"sealed with another key (restore that key, or set {SETTING} to it)"
            ) from None

    def seal_optional(self, value: str | None) -> str | None:
        return None if value is None else self.seal(value)

    def unseal_optional(self, stored: str | None) -> str | None:
        return None if stored is None else self.unseal(stored)


def _read_key_file(path: Path) -> list[str]:
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            path.chmod(0o600)
            logger.warning("%s was readable by others: made 0600", path)
        keys = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the key file {path}: {exc.__class__.__name__}") from None
    if not keys:
        raise ConfigError(f"the key file {path} is empty")
    return keys


def _write_key_file(path: Path, keys: list[str], *, exclusive: bool = False) -> None:
    """Write *keys* to *path*, owner-only, whole or not at all (a temporary file renamed
    over it); *exclusive*: only if it does not exist yet."""
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o700)
    text = "".join(f"{k}\n" for k in keys).encode()
    if exclusive:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(text)
        return
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)


def sealed_columns() -> list[tuple[Any, str]]:
    """(model, column name) of every value kept sealed."""
    from crawlfleet.state.models import AlertRule, ScrapydNode, Timer

    return [
        (ScrapydNode, "password"),
        (AlertRule, "webhook_url"),
        (AlertRule, "secret"),
        (Timer, "params"),
    ]


def reseal(db: Sessions, sealer: Sealer, *, every: bool = False) -> int:
    """Seal the values kept in clear (from before sealing), or with *every*, seal every
    value again with the sealer's first key; returns how many were written. One
    transaction: all or nothing."""
    written = 0
    with db.session() as s:
        for model, column in sealed_columns():
            for row in s.scalars(select(model)):
                stored = getattr(row, column)
                if stored is None or (stored.startswith(PREFIX) and not every):
                    continue
                setattr(row, column, sealer.seal(sealer.unseal(stored)))
                written += 1
    return written


def rotate(db: Sessions, sealer: Sealer) -> tuple[int, str]:
    """Seal every secret again with a new first key: (values written, what was done).

    With the key file: a new key is put first in the file, every value is sealed with
    it, then the file keeps only the new key and the old ones move to
    ``secret.key.<time>.retired`` (for backups of the state DB made before). Stopped at
    any point, the file still opens every value. With CRAWLFLEET_SECRET_KEY, the new key
    must already be first in it (ConfigError otherwise)."""
    if sealer.path is None:
        if len(sealer.keys) < 2:
            raise ConfigError(
                f"to rotate, {SETTING} must hold the new key first and the old one after it, "
                "comma-separated (`crawlfleet manager key new` makes one)"
            )
        written = reseal(db, sealer, every=True)
        return written, f"sealed with the first key of {SETTING}: the others may now go"
    old = list(sealer.keys)
    fresh = new_key()
    _write_key_file(sealer.path, [fresh, *old])
    written = reseal(db, Sealer([fresh, *old], sealer.source, sealer.path), every=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    retired = sealer.path.with_name(f"{sealer.path.name}.{stamp}.retired")
    _write_key_file(retired, old, exclusive=True)
    _write_key_file(sealer.path, [fresh])
    return written, f"new key in {sealer.path}; the old one kept in {retired}"
