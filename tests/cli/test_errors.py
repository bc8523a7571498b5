"""Errors an operator can act on, and one configuration for every command: each command
run with Redis unreachable, a misspelt setting, an unknown job, or inside a Scrapy
project whose settings.py names the Redis. Real processes, real Redis."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import redis

from crawlfleet.redis.keys import JobKeys

ROOT = Path(__file__).resolve().parents[2]
#: a loopback port nothing listens on, with a password that must never be printed
UNREACHABLE = "redis://:s3cr3t-pw@127.0.0.1:1/0"


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawlfleet.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )


COMMANDS = [
    ["seed", "books", "http://127.0.0.1:9/"],
    ["job", "status", "books"],
    ["job", "list"],
    ["job", "reset", "books"],
    ["limits", "list", "books"],
    ["limits", "set", "books", "*", "2/1s"],
    ["items", "status", "books"],
    ["status"],
    ["status", "books", "--json"],
    ["health"],
    ["control", "pause", "books"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_redis_unreachable_is_one_line_without_the_password(command: list[str]) -> None:
    r = cli(*command, "--redis-url", UNREACHABLE)
    assert r.returncode == 1, r.stdout + r.stderr
    output = (r.stdout + r.stderr).strip()
    assert "Traceback" not in output
    assert "s3cr3t" not in output
    lines = output.splitlines()
    assert len(lines) == 1, output
    assert "Redis at redis://:***@127.0.0.1:1/0 unreachable" in lines[0]


def test_a_misspelt_setting_is_named_with_a_suggestion(redis_server_url: str) -> None:
    for command in (["status"], ["health"], ["control", "pause", "x"], ["seed", "x", "u"]):
        r = cli(*command, "--redis-url", redis_server_url, "-s", "CRAWLFLEET_LEASE_SECOND=3")
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr.strip().splitlines() == [
            f"crawlfleet {command[0]}: error: unknown setting CRAWLFLEET_LEASE_SECOND "
            "(did you mean CRAWLFLEET_LEASE_SECONDS?)"
        ]


def test_an_unknown_job_is_an_error(redis_server_url: str, key_prefix: str) -> None:
    common = ["--redis-url", redis_server_url, "-s", f"CRAWLFLEET_KEY_PREFIX={key_prefix}"]
    assert cli("seed", "known", "http://127.0.0.1:9/", *common).returncode == 0
    for command in (
        ["job", "status", "nknown"],
        ["status", "nknown"],
        ["limits", "list", "nknown"],
        ["control", "pause", "nknown"],
    ):
        r = cli(*command, *common)
        assert r.returncode == 1, r.stdout + r.stderr
        assert r.stderr.strip() == (
            f"crawlfleet {command[0]}: error: no job 'nknown' in this Redis "
            f"(key prefix {key_prefix!r}); known jobs: known"
        )


def test_reset_clears_the_limits_unless_asked_to_keep_them(
    redis_server_url: str, key_prefix: str, sync_redis: redis.Redis
) -> None:
    common = ["--redis-url", redis_server_url, "-s", f"CRAWLFLEET_KEY_PREFIX={key_prefix}"]
    limits = JobKeys.of(key_prefix, "tuned").limits
    for keep in (True, False):
        assert cli("seed", "tuned", "http://127.0.0.1:9/", *common).returncode == 0
        assert cli("limits", "set", "tuned", "*", "1/1s", *common).returncode == 0
        r = cli("job", "reset", "tuned", *common, *(["--keep-limits"] if keep else []))
        assert r.returncode == 0, r.stderr
        assert sync_redis.hgetall(limits) == ({b"*": b"1/1s"} if keep else {})


def test_commands_read_the_projects_settings(
    redis_server_url: str, key_prefix: str, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    """Inside a Scrapy project, `crawlfleet seed` queues into the Redis and key prefix
    of its settings.py (it used the embedded Redis before); -s still wins."""
    (tmp_path / "scrapy.cfg").write_text("[settings]\ndefault = proj.settings\n")
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "__init__.py").write_text("")
    (tmp_path / "proj" / "settings.py").write_text(
        textwrap.dedent(
            f"""
            BOT_NAME = "proj"
            ADDONS = {{"crawlfleet.Addon": 100}}
            CRAWLFLEET_REDIS_URL = {redis_server_url!r}
            CRAWLFLEET_KEY_PREFIX = {key_prefix!r}
            """
        )
    )
    r = cli("seed", "books", "http://127.0.0.1:9/", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert int(sync_redis.hget(JobKeys.of(key_prefix, "books").counters, "queued") or 0) == 1
    r = cli("job", "status", "books", "--json", cwd=tmp_path)
    assert r.returncode == 0 and '"queued": 1' in r.stdout, r.stdout + r.stderr
    # a misspelt setting in settings.py is caught too
    with (tmp_path / "proj" / "settings.py").open("a") as fh:
        fh.write("CRAWLFLEET_SEEN_MODES = 'bloom'\n")
    r = cli("status", cwd=tmp_path)
    assert r.returncode == 2
    assert "unknown setting CRAWLFLEET_SEEN_MODES (did you mean CRAWLFLEET_SEEN_MODE?)" in r.stderr


def test_a_setting_error_under_scrapy_crawl_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "scrapy.cfg").write_text("[settings]\ndefault = proj.settings\n")
    (tmp_path / "proj" / "spiders").mkdir(parents=True)
    (tmp_path / "proj" / "__init__.py").write_text("")
    (tmp_path / "proj" / "spiders" / "__init__.py").write_text("")
    (tmp_path / "proj" / "settings.py").write_text(
        'BOT_NAME = "proj"\nSPIDER_MODULES = ["proj.spiders"]\n'
        'ADDONS = {"crawlfleet.Addon": 100}\nCRAWLFLEET_SEEN_MODE = "blom"\n'
    )
    (tmp_path / "proj" / "spiders" / "s.py").write_text(
        "import scrapy\n\nclass S(scrapy.Spider):\n    name = 's'\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "s"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    errors = [line for line in r.stderr.splitlines() if " ERROR: " in line]
    assert len(errors) == 1 and errors[0].endswith(
        "crawlfleet: CRAWLFLEET_SEEN_MODE must be one of 'exact', 'bloom'; got 'blom'"
    ), r.stderr[-3000:]
