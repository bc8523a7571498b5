"""One configuration for every command: run inside a Scrapy project, a command reads
its settings.py, then the environment, then -s, as ``scrapy`` and the nodes do; and a
setting error under ``scrapy crawl`` is one line. Real processes, real Redis."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from crawlfleet.redis.keys import JobKeys
from tests.support.cli import UNREACHABLE, cli, make_project


def queued(client: redis.Redis, prefix: str, job: str) -> int:
    return int(client.hget(JobKeys.of(prefix, job).counters, "queued") or 0)


def test_commands_read_the_projects_settings(
    redis_server_url: str, key_prefix: str, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    """Inside a Scrapy project, `crawlfleet seed` queues into the Redis and key prefix
    of its settings.py (it used the embedded Redis before), from a subfolder too."""
    settings = make_project(
        tmp_path,
        f"CRAWLFLEET_REDIS_URL = {redis_server_url!r}\nCRAWLFLEET_KEY_PREFIX = {key_prefix!r}\n",
    )
    r = cli("seed", "books", "http://127.0.0.1:9/", cwd=tmp_path / "proj" / "spiders")
    assert r.returncode == 0, r.stderr
    assert queued(sync_redis, key_prefix, "books") == 1
    r = cli("job", "status", "books", "--json", cwd=tmp_path)
    assert r.returncode == 0 and '"queued": 1' in r.stdout, r.stdout + r.stderr
    r = cli("-v", "status", cwd=tmp_path)
    assert "settings: project proj.settings" in r.stderr
    # a misspelt setting in settings.py is caught too
    with settings.open("a") as fh:
        fh.write("CRAWLFLEET_SEEN_MODES = 'bloom'\n")
    r = cli("status", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "crawlfleet status: error: unknown setting CRAWLFLEET_SEEN_MODES "
        "(did you mean CRAWLFLEET_SEEN_MODE?)"
    )


def test_precedence_settings_py_then_environment_then_command_line(
    redis_server_url: str, key_prefix: str, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    make_project(
        tmp_path,
        f"CRAWLFLEET_REDIS_URL = {UNREACHABLE!r}\nCRAWLFLEET_KEY_PREFIX = {key_prefix!r}\n",
    )
    seed = ("seed", "order", "http://127.0.0.1:9/a")
    r = cli(*seed, cwd=tmp_path)  # settings.py alone: its (unreachable) Redis
    assert r.returncode == 1 and "Redis at redis://:***@127.0.0.1:1/0 unreachable" in r.stderr
    r = cli(*seed, cwd=tmp_path, CRAWLFLEET_REDIS_URL=redis_server_url)  # env beats it
    assert r.returncode == 0, r.stderr
    assert queued(sync_redis, key_prefix, "order") == 1
    r = cli(  # -s beats the environment
        *seed, "-s", f"CRAWLFLEET_REDIS_URL={UNREACHABLE}", cwd=tmp_path,
        CRAWLFLEET_REDIS_URL=redis_server_url,
    )  # fmt: skip
    assert r.returncode == 1 and "unreachable" in r.stderr and "s3cr3t" not in r.stderr


def test_settings_module_from_the_environment(
    redis_server_url: str, key_prefix: str, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    """SCRAPY_SETTINGS_MODULE, without a scrapy.cfg in sight, as scrapy reads it."""
    make_project(
        tmp_path / "p",
        f"CRAWLFLEET_REDIS_URL = {redis_server_url!r}\nCRAWLFLEET_KEY_PREFIX = {key_prefix!r}\n",
    )
    (tmp_path / "p" / "scrapy.cfg").unlink()
    (tmp_path / "elsewhere").mkdir()
    r = cli(
        "seed", "env", "http://127.0.0.1:9/", cwd=tmp_path / "elsewhere",
        SCRAPY_SETTINGS_MODULE="proj.settings", PYTHONPATH=str(tmp_path / "p"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert queued(sync_redis, key_prefix, "env") == 1


def test_a_broken_settings_py_is_one_line(tmp_path: Path) -> None:
    settings = make_project(tmp_path, "CRAWLFLEET_KEY_PREFIX = 'cf'\n")
    with settings.open("a") as fh:
        fh.write("import no_such_module_here\n")
    r = cli("job", "list", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == (
        "crawlfleet job list: error: cannot load the Scrapy project's settings "
        "proj.settings: ModuleNotFoundError: No module named 'no_such_module_here'"
    )


@pytest.mark.parametrize(
    ("settings", "status", "message"),
    [
        # found by the add-on, before Scrapy builds anything: exit 2
        (
            'CRAWLFLEET_SEEN_MODE = "blom"\n',
            2,
            "crawlfleet: CRAWLFLEET_SEEN_MODE must be one of 'exact', 'bloom'; got 'blom'",
        ),
        (
            'CRAWLFLEET_STORES = ["sqll"]\n',
            2,
            "crawlfleet: CRAWLFLEET_STORES has unknown names ['sqll']; known: sql, mongodb, redis",
        ),
        # found by a component as Scrapy builds it: Scrapy's exit status
        (
            'CRAWLFLEET_STORES = ["sql"]\nCRAWLFLEET_SQL_URL = "bogus://x"\n',
            1,
            "crawlfleet: CRAWLFLEET_SQL_URL: database 'bogus' is not supported",
        ),
    ],
    ids=["addon", "addon-stores", "component"],
)
def test_a_setting_error_under_scrapy_crawl_is_one_line(
    tmp_path: Path, settings: str, status: int, message: str
) -> None:
    make_project(tmp_path, f"CRAWLFLEET_REDIS_URL = {UNREACHABLE!r}\n{settings}")
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
    assert r.returncode == status, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "s3cr3t" not in r.stderr, r.stderr[-3000:]
    errors = [line for line in r.stderr.splitlines() if " ERROR: " in line]
    assert len(errors) == 1 and message in errors[0], r.stderr[-3000:]


def test_scrapy_crawl_gives_up_on_an_unreachable_redis_at_start(tmp_path: Path) -> None:
    """No Redis at start: CRAWLFLEET_REDIS_START_TIMEOUT later the node gives up with one
    line (no secret), the spider closes with reason redis_unreachable, the exit is
    non-zero. (Before: a retry every 10 s, for ever.)"""
    make_project(
        tmp_path, f"CRAWLFLEET_REDIS_URL = {UNREACHABLE!r}\nCRAWLFLEET_REDIS_START_TIMEOUT = 2\n"
    )
    (tmp_path / "proj" / "spiders" / "s.py").write_text(
        "import scrapy\n\nclass S(scrapy.Spider):\n    name = 's'\n"
    )
    started = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "s"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    took = time.monotonic() - started
    assert r.returncode == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "s3cr3t" not in r.stderr, r.stderr[-3000:]
    errors = [line for line in r.stderr.splitlines() if " ERROR: " in line]
    assert len(errors) == 1, r.stderr[-3000:]
    assert "crawlfleet: Redis at redis://:***@127.0.0.1:1/0 unreachable for " in errors[0]
    assert "CRAWLFLEET_REDIS_START_TIMEOUT = 2" in errors[0]
    assert "'finish_reason': 'redis_unreachable'" in r.stderr, r.stderr[-3000:]
    assert 2 <= took < 30, took


def test_a_component_setting_error_under_crawlfleet_crawl_is_one_line(
    redis_server_url: str, key_prefix: str, tmp_path: Path
) -> None:
    r = cli(
        "crawl", "crawlfleet.testsite.spider:TestSiteSpider", "--job", "bad",
        "--redis-url", redis_server_url, "-s", f"CRAWLFLEET_KEY_PREFIX={key_prefix}",
        "-s", "CRAWLFLEET_STORES=sql", "-s", "CRAWLFLEET_SQL_URL=bogus://x",
        cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "Unhandled" not in r.stderr, r.stderr[-3000:]
    errors = [line for line in r.stderr.splitlines() if " ERROR: " in line]
    assert len(errors) == 1, r.stderr[-3000:]
    assert "crawlfleet: CRAWLFLEET_SQL_URL: database 'bogus' is not supported" in errors[0]


def test_an_unknown_spider_gets_a_suggestion(tmp_path: Path) -> None:
    make_project(tmp_path, "")
    (tmp_path / "proj" / "spiders" / "books.py").write_text(
        "import scrapy\n\n\nclass Books(scrapy.Spider):\n    name = 'books'\n"
    )
    typo = cli("crawl", "bokos", "--redis-url", "redis://127.0.0.1:1/0", cwd=tmp_path)
    assert typo.returncode == 2
    assert typo.stderr.strip().splitlines() == [
        "crawlfleet crawl: error: spider 'bokos' not found: did you mean 'books'?"
    ]
    other = cli("crawl", "zzz", "--redis-url", "redis://127.0.0.1:1/0", cwd=tmp_path)
    assert "spider 'zzz' not found: the project's spiders: books" in other.stderr
