"""Secrets sealed at rest: the state DB file is owner-only, the columns that keep
secrets hold no plain text (read back with sqlite3 and SQL), the key file is made
owner-only, a value from before sealing is sealed at the next start, and rotation
leaves every value readable with the new key alone."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from scrapy.settings import Settings

from crawlfleet.exceptions import ConfigError
from crawlfleet.settings.config import apply_defaults
from crawlfleet.state.alerts import create_rule, rules_enabled
from crawlfleet.state.db import StateDB
from crawlfleet.state.models import ScrapydNode
from crawlfleet.state.scrapyd import add_scrapyd, list_scrapyd
from crawlfleet.state.sealing import KEY_FILE, PREFIX, Sealer, new_key, reseal, rotate
from crawlfleet.state.timers import create_timer, due_timers, list_timers

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "scrapyd-pw-4f1c"
WEBHOOK = "https://hooks.example/services/T0KEN-9a8b"
SIGNING = "signing-secret-0123456789abcdef"
REDIS_PASSWORD = "redis-pw-77e2"


def settings_for(data_dir: Path, key: str = "") -> Settings:
    settings = Settings()
    apply_defaults(settings)
    settings.set("CRAWLFLEET_DATA_DIR", str(data_dir), priority="cmdline")
    settings.set("CRAWLFLEET_SECRET_KEY", key, priority="cmdline")
    return settings


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def keep_secrets(db: StateDB) -> None:
    """One of each secret the state DB keeps."""
    add_scrapyd(db, "s1", "http://127.0.0.1:6800", "admin", PASSWORD)
    create_rule(
        db,
        name="r1",
        job=None,
        metric="errors",
        op=">",
        threshold=1.0,
        for_seconds=0.0,
        webhook_url=WEBHOOK,
        secret=SIGNING,
        actor="t",
        metrics=("errors",),
    )
    run = {"spider": "s", "settings": {"CRAWLFLEET_REDIS_URL": f"redis://:{REDIS_PASSWORD}@r/0"}}
    create_timer(db, "t1", "j", "run", "* * * * *", run, "t")


def assert_readable(db: StateDB) -> None:
    assert list_scrapyd(db)[0].password == PASSWORD
    (rule,) = rules_enabled(db)
    assert rule["webhook_url"] == WEBHOOK and rule["secret"] == SIGNING
    assert rule["webhook"] == "https://hooks.example/..."
    assert REDIS_PASSWORD not in str(list_timers(db))  # shown redacted
    from datetime import datetime, timedelta

    (due,) = due_timers(db, datetime.now() + timedelta(days=1))
    assert REDIS_PASSWORD in due["params"]["settings"]["CRAWLFLEET_REDIS_URL"]  # fired as given


def sealed_values(db: StateDB) -> list[str]:
    """Every value of the sealed columns, as the DB holds it."""
    with db.engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT password FROM crawlfleet_scrapyd UNION ALL "
                "SELECT webhook_url FROM crawlfleet_alert_rules UNION ALL "
                "SELECT secret FROM crawlfleet_alert_rules UNION ALL "
                "SELECT params FROM crawlfleet_timers"
            )
        )
        return [r[0] for r in rows]


def test_secrets_hold_no_plain_text_on_every_backend(state_db: StateDB) -> None:
    state_db.sealer = Sealer([new_key()], "a test key")
    keep_secrets(state_db)
    values = sealed_values(state_db)
    assert len(values) == 4 and all(v.startswith(PREFIX) for v in values)
    for secret in (PASSWORD, "T0KEN", SIGNING, REDIS_PASSWORD):
        assert not any(secret in v for v in values)
    assert_readable(state_db)


def test_the_sqlite_file_is_owner_only_and_holds_no_secret(tmp_path: Path) -> None:
    folder = tmp_path / "made-here"
    path = folder / "state.sqlite3"
    db = StateDB.open(f"sqlite:///{path}")
    db.upgrade()
    db.sealer = Sealer.from_settings(settings_for(tmp_path / "data"))
    keep_secrets(db)
    db.close()
    assert mode(path) == 0o600 and mode(folder) == 0o700
    key_file = tmp_path / "data" / KEY_FILE
    assert mode(key_file) == 0o600 and mode(key_file.parent) == 0o700
    with sqlite3.connect(path) as conn:  # what anyone who reads the file sees
        dumped = "\n".join(conn.iterdump())
    assert "crawlfleet_scrapyd" in dumped
    for secret in (PASSWORD, "T0KEN", SIGNING, REDIS_PASSWORD):
        assert secret not in dumped
        assert secret.encode() not in path.read_bytes()


def test_a_state_db_readable_by_others_is_made_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    path.touch(mode=0o644)
    os.chmod(path, 0o644)
    StateDB.open(f"sqlite:///{path}").close()
    assert mode(path) == 0o600


def test_secrets_from_before_sealing_are_sealed_at_the_next_start(tmp_path: Path) -> None:
    db = StateDB.open(f"sqlite:///{tmp_path / 'state.sqlite3'}")
    db.upgrade()
    with db.session() as s:  # as a manager of the previous version wrote it
        s.add(
            ScrapydNode(
                name="old",
                url="http://h:6800",
                username="u",
                password=PASSWORD,
                created_at=__import__("datetime").datetime(2026, 1, 1),
            )
        )
    db.sealer = Sealer([new_key()], "a test key")
    assert list_scrapyd(db)[0].password == PASSWORD  # read as it is
    assert reseal(db, db.sealer) == 1 and reseal(db, db.sealer) == 0
    assert sealed_values(db)[0].startswith(PREFIX)
    assert list_scrapyd(db)[0].password == PASSWORD
    db.close()


def test_rotating_the_key_file(tmp_path: Path) -> None:
    db = StateDB.open(f"sqlite:///{tmp_path / 'state.sqlite3'}")
    db.upgrade()
    settings = settings_for(tmp_path / "data")
    db.sealer = Sealer.from_settings(settings)
    keep_secrets(db)
    old_key = db.sealer.keys[0]
    before = sealed_values(db)
    written, said = rotate(db, db.sealer)
    assert written == 4 and "retired" in said
    key_file = tmp_path / "data" / KEY_FILE
    (new,) = key_file.read_text().split()
    assert new != old_key and mode(key_file) == 0o600
    (retired,) = (tmp_path / "data").glob(f"{KEY_FILE}.*.retired")
    assert retired.read_text().split() == [old_key] and mode(retired) == 0o600
    after = sealed_values(db)
    assert all(a != b for a, b in zip(before, after, strict=True))
    db.sealer = Sealer.from_settings(settings)  # the new key alone opens everything
    assert db.sealer.keys == [new]
    assert_readable(db)
    db.sealer = Sealer([old_key], "the old key")
    with pytest.raises(ConfigError, match="sealed with another key"):
        list_scrapyd(db)
    db.close()


def test_rotating_keys_given_in_the_setting(tmp_path: Path) -> None:
    db = StateDB.open(f"sqlite:///{tmp_path / 'state.sqlite3'}")
    db.upgrade()
    old, new = new_key(), new_key()
    db.sealer = Sealer.from_settings(settings_for(tmp_path, old))
    keep_secrets(db)
    with pytest.raises(ConfigError, match="new key first"):
        rotate(db, db.sealer)
    db.sealer = Sealer.from_settings(settings_for(tmp_path, f"{new},{old}"))
    assert rotate(db, db.sealer)[0] == 4
    db.sealer = Sealer.from_settings(settings_for(tmp_path, new))
    assert_readable(db)
    assert not (tmp_path / KEY_FILE).exists()  # the setting's keys: no key file made
    with pytest.raises(ConfigError, match="CRAWLFLEET_SECRET_KEY holds something"):
        Sealer.from_settings(settings_for(tmp_path, "not-a-key"))
    db.close()


def test_key_commands(tmp_path: Path) -> None:
    env = {**os.environ, "CRAWLFLEET_DATA_DIR": str(tmp_path / "data")}
    env.pop("CRAWLFLEET_SECRET_KEY", None)
    db_url = f"sqlite:///{tmp_path / 'state.sqlite3'}"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "crawlfleet.cli.main", "manager", "key", *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
        )

    made = cli("new")
    assert made.returncode == 0 and Sealer([made.stdout.strip()], "printed")
    missing = cli("rotate", "--db", db_url, "-s", f"CRAWLFLEET_DATA_DIR={tmp_path / 'data'}")
    assert missing.returncode == 2 and "no key file" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    db = StateDB.open(db_url)
    db.upgrade()
    db.sealer = Sealer.from_settings(settings_for(tmp_path / "data"))
    keep_secrets(db)
    rotated = cli("rotate", "--db", db_url, "-s", f"CRAWLFLEET_DATA_DIR={tmp_path / 'data'}")
    assert rotated.returncode == 0, rotated.stderr
    assert "4 secrets" in rotated.stdout and PASSWORD not in rotated.stdout
    db.sealer = Sealer.from_settings(settings_for(tmp_path / "data"))
    assert_readable(db)
    db.close()
