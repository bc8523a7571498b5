"""Errors an operator can act on: each command run with Redis unreachable, hung or
refusing the credentials, a misspelt setting, a bad option, an unknown job. Real
processes, real Redis; the expected failure is one line on stderr, never a traceback,
never a password."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

from crawlfleet.redis.keys import JobKeys
from crawlfleet.redis.localcluster import RedisProcess
from tests.support.cli import UNREACHABLE, one_error_line

ROOT = Path(__file__).resolve().parents[2]
SPIDER = "crawlfleet.testsite.spider:TestSiteSpider"


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "crawlfleet.cli.main", *args]


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(*args),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )


#: every command that talks to Redis
COMMANDS = [
    ["seed", "books", "http://127.0.0.1:9/"],
    ["job", "status", "books"],
    ["job", "list"],
    ["job", "reset", "books"],
    ["limits", "list", "books"],
    ["limits", "set", "books", "*", "2/1s"],
    ["limits", "unset", "books", "*"],
    ["items", "status", "books"],
    ["items", "work", "books", "--to", "sqlite:///unused.sqlite3"],
    ["status"],
    ["status", "books", "--json"],
    ["status", "--watch", "--count", "1"],
    ["health"],
    ["control", "pause", "books"],
    ["control", "concurrency", "4", "books"],
    ["proxies", "status"],
    ["proxies", "add", "http://127.0.0.1:3128"],
    ["crawl", SPIDER, "--job", "books"],
    ["demo"],
    ["bench"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_redis_unreachable_is_one_line_without_the_password(args: list[str]) -> None:
    line = one_error_line(cli(*args, "--redis-url", UNREACHABLE))
    assert "Redis at redis://:***@127.0.0.1:1/0 unreachable" in line


@pytest.fixture
def hung_url() -> Iterator[str]:
    """A port that accepts connections (the kernel's backlog) and never answers: what a
    stopped (SIGSTOP) or wedged Redis looks like to a client."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(32)
        yield f"redis://:s3cr3t-pw@127.0.0.1:{server.getsockname()[1]}/0"


def test_a_hung_redis_is_an_error_after_a_few_seconds(hung_url: str) -> None:
    started = time.monotonic()
    procs = [
        subprocess.Popen(
            command(*args, "--redis-url", hung_url),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
        )
        for args in (["seed", "b", "http://127.0.0.1:9/"], ["status"], ["job", "list"])
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=40)
        line = one_error_line(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
        assert "unreachable: Timeout" in line, line
    assert time.monotonic() - started < 25  # 5-s socket timeouts, not a hang


def test_credentials_refused_are_one_line(redis_server_url: str) -> None:
    parts = urlsplit(redis_server_url)
    if parts.password or parts.username or "@" in parts.netloc:
        pytest.skip(f"the test Redis needs credentials: {parts.hostname}:{parts.port}")
    host = parts.netloc
    wrong = [
        # a user this server does not have
        urlunsplit(parts._replace(netloc=f"crawlfleet-nobody:s3cr3t-pw@{host}")),
        # a password on a server without one (RESP2: a plain AUTH, which it refuses)
        urlunsplit(parts._replace(netloc=f":s3cr3t-pw@{host}", query="protocol=2")),
    ]
    for url in wrong:
        for args in (["job", "list"], ["seed", "x", "http://127.0.0.1:9/"], ["status"]):
            line = one_error_line(cli(*args, "--redis-url", url))
            assert "refused the credentials" in line and ":***@" in line, line


def test_a_misspelt_setting_is_named_with_a_suggestion(redis_server_url: str) -> None:
    for args in (["status"], ["health"], ["control", "pause", "x"], ["seed", "x", "u"]):
        r = cli(*args, "--redis-url", redis_server_url, "-s", "CRAWLFLEET_LEASE_SECOND=3")
        prog = "crawlfleet " + " ".join(args[:2] if args[0] == "control" else args[:1])
        assert one_error_line(r, 2) == (
            f"{prog}: error: unknown setting CRAWLFLEET_LEASE_SECOND "
            "(did you mean CRAWLFLEET_LEASE_SECONDS?)"
        )
    for given, meant in (
        ("REDIS_URL", "CRAWLFLEET_REDIS_URL"),  # scrapy-redis's name
        ("crawlfleet_job", "CRAWLFLEET_JOB"),
        ("CONCURENT_REQUESTS", "CONCURRENT_REQUESTS"),
    ):
        r = cli("job", "list", "--redis-url", redis_server_url, "-s", f"{given}=1")
        assert one_error_line(r, 2) == (
            f"crawlfleet job list: error: unknown setting {given} (did you mean {meant}?)"
        )


def test_a_bad_option_or_argument_is_one_line() -> None:
    line = one_error_line(cli("status", "--bogus"), 2)
    assert line == (
        "crawlfleet status: error: unrecognized arguments: --bogus (see crawlfleet status --help)"
    )
    line = one_error_line(cli("job", "status"), 2)
    assert line.startswith("crawlfleet job status: error: the following arguments are required")
    line = one_error_line(cli("status", "--interval", "soon"), 2)
    assert "argument --interval: invalid float value: 'soon'" in line
    line = one_error_line(cli("seed", "x", "--file", "/nonexistent/seeds.txt"), 1)
    assert line == "crawlfleet seed: error: /nonexistent/seeds.txt: No such file or directory"
    line = one_error_line(cli("crawl", "no_such_module:Spider", "--redis-url", UNREACHABLE), 2)
    assert line.startswith("crawlfleet crawl: error: cannot load spider 'no_such_module:Spider'")


def test_a_spider_that_refuses_its_arguments_is_one_line_at_the_end(
    redis_server_url: str, key_prefix: str
) -> None:
    """Scrapy's own log around it, but no traceback (that comes with a debug log) and
    no second error about stats that were never set."""
    r = cli(
        "crawl",
        "crawlfleet.benchmark.linkspider:LinkSpider",
        "--job",
        "refused",
        "--redis-url",
        redis_server_url,
        "-s",
        f"CRAWLFLEET_KEY_PREFIX={key_prefix}",
        "-s",
        "LOG_LEVEL=INFO",
    )
    assert r.returncode == 1
    assert "Traceback" not in r.stderr + r.stdout
    assert (
        r.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "ERROR: crawlfleet: LinkSpider could not start: ValueError: LinkSpider needs the "
            "start_urls argument"
        )
    )


def test_the_benchmarks_real_part_says_what_is_wrong_with_its_site() -> None:
    line = one_error_line(cli("bench", "--only", "real"), 2)
    assert line == (
        "crawlfleet bench: error: the real part needs --real-url, an http(s) URL to start "
        "the crawl from (given: none)"
    )
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://someone:s3cr3t-pw@127.0.0.1:{port}/"
    line = one_error_line(cli("bench", "--only", "real", "--real-url", url), 2)
    assert line == (
        f"crawlfleet bench: error: --real-url http://someone:***@127.0.0.1:{port}/ does not "
        "answer: [Errno 111] Connection refused"
    )


def test_an_unknown_job_is_an_error(redis_server_url: str, key_prefix: str) -> None:
    common = ["--redis-url", redis_server_url, "-s", f"CRAWLFLEET_KEY_PREFIX={key_prefix}"]
    assert cli("seed", "known", "http://127.0.0.1:9/", *common).returncode == 0
    for args in (
        ["job", "status", "nknown"],
        ["job", "reset", "nknown"],
        ["status", "nknown"],
        ["limits", "list", "nknown"],
        ["limits", "unset", "nknown", "*"],
        ["control", "pause", "nknown"],
        ["items", "status", "nknown"],
    ):
        prog = " ".join(args[:-1] if args[-1] != "*" else args[:-2])
        assert one_error_line(cli(*args, *common)) == (
            f"crawlfleet {prog}: error: no job 'nknown' in this Redis "
            f"(key prefix {key_prefix!r}); known jobs: known"
        )
    r = cli("health", "nknown", *common)
    assert (
        r.returncode == 1 and r.stdout.strip() == "unhealthy: job nknown: not known to this Redis"
    )


def test_verbose_says_which_redis_and_job_and_keeps_json_pure(
    redis_server_url: str, key_prefix: str
) -> None:
    common = ["--redis-url", redis_server_url, "-s", f"CRAWLFLEET_KEY_PREFIX={key_prefix}"]
    assert cli("seed", "seen", "http://127.0.0.1:9/", *common).returncode == 0
    for args in (["-v", "job", "status", "seen"], ["job", "status", "seen", "-v"]):
        r = cli(*args, "--json", *common)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["queued"] == 1  # stdout: the document only
        assert (
            f"Redis: {redis_server_url} from CRAWLFLEET_REDIS_URL (key prefix {key_prefix})"
            in r.stderr
        )
        assert "job: seen" in r.stderr
    r = cli("job", "status", "seen", "-v", "--redis-url", UNREACHABLE)
    assert "Redis: redis://:***@127.0.0.1:1/0" in r.stderr and "s3cr3t" not in r.stderr
    quiet = cli("job", "status", "seen", "--json", *common)
    assert quiet.stderr == ""  # without -v: nothing but the document


def test_reset_clears_the_limits_unless_asked_to_keep_them(
    redis_server_url: str, key_prefix: str, sync_redis: redis.Redis
) -> None:
    common = ["--redis-url", redis_server_url, "-s", f"CRAWLFLEET_KEY_PREFIX={key_prefix}"]
    keys = JobKeys.of(key_prefix, "tuned")
    for keep in (True, False):
        assert cli("seed", "tuned", "http://127.0.0.1:9/", *common).returncode == 0
        assert cli("limits", "set", "tuned", "*", "1/1s", *common).returncode == 0
        r = cli("job", "reset", "tuned", *common, *(["--keep-limits"] if keep else []))
        assert r.returncode == 0, r.stderr
        assert sync_redis.hgetall(keys.limits) == ({b"*": b"1/1s"} if keep else {})
        assert not sync_redis.exists(keys.counters, keys.sites, keys.req, keys.seen)
        # kept limits are the job's state: it stays listed (`limits list` reads them)
        assert sync_redis.sismember(f"{key_prefix}:jobs", "tuned") == keep
        if keep:
            assert "*\t1/1s" in cli("limits", "list", "tuned", *common).stdout
    # what is left of the job after a reset with --keep-limits is gone with the next one
    assert list(sync_redis.scan_iter(match=f"{key_prefix}:*")) == []


def test_status_watch_rides_out_a_redis_outage(tmp_path: Path) -> None:
    """Redis goes away under `status --watch --json` and comes back: the outage is said
    once on stderr, its end too, and stdout stays one JSON document a line."""
    server = RedisProcess(tmp_path / "redis")
    server.start()
    out, err = tmp_path / "out", tmp_path / "err"
    try:
        with out.open("w") as o, err.open("w") as e:
            proc = subprocess.Popen(
                command("status", "--watch", "--json", "--interval", "0.5"),
                stdout=o,
                stderr=e,
                stdin=subprocess.DEVNULL,
                cwd=ROOT,
                env=_env(CRAWLFLEET_REDIS_URL=server.url),
            )
        try:
            _wait_for(lambda: out.read_text().count("\n") >= 1, "a first refresh")
            server.kill()
            _wait_for(lambda: "still watching" in err.read_text(), "the outage said")
            server.start()
            _wait_for(lambda: "reachable again" in err.read_text(), "the end said")
            lines = out.read_text().count("\n")
            _wait_for(lambda: out.read_text().count("\n") > lines, "a refresh after")
        finally:
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=20) == 0
    finally:
        server.kill()
    for line in out.read_text().splitlines():
        assert json.loads(line) == {"jobs": {}}
    notes = err.read_text().splitlines()
    assert len(notes) == 2 and "Traceback" not in err.read_text(), notes
    assert f"Redis at {server.url} unreachable" in notes[0]
    assert "Redis reachable again after" in notes[1]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, **extra}


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_reset_keeps_the_item_stream_and_says_so(
    redis_server_url: str, key_prefix: str, sync_redis: redis.Redis
) -> None:
    common = ["--redis-url", redis_server_url, "-s", f"CRAWLFLEET_KEY_PREFIX={key_prefix}"]
    keys = JobKeys.of(key_prefix, "output")
    assert cli("seed", "output", "http://127.0.0.1:9/", *common).returncode == 0
    sync_redis.xadd(keys.items, {"v": "1"})
    r = cli("job", "reset", "output", *common)
    assert r.returncode == 0, r.stderr
    assert "its item stream is kept: 1 entries (crawlfleet items work output)" in r.stdout
    r = cli("items", "status", "output", "--json", *common)  # a reset job, items waiting
    assert r.returncode == 0 and json.loads(r.stdout)["length"] == 1, r.stdout + r.stderr


def test_a_spider_is_taken_from_its_file_or_a_module_of_the_current_directory(
    tmp_path: Path,
) -> None:
    """As ``scrapy runspider FILE.py`` takes a file's spider, ``crawlfleet crawl``
    takes ``FILE.py`` (its one spider) or ``FILE.py:Class``; ``module:Class`` is
    imported from the current directory too, as with ``python -m`` (the installed
    ``crawlfleet`` script does not have it on its path). Each then reaches the Redis
    check (exit 1: unreachable); a file with two spiders, or none, is one line."""
    (tmp_path / "two.py").write_text(
        "import scrapy\n\n"
        "class First(scrapy.Spider):\n    name = 'first'\n\n"
        "class Second(scrapy.Spider):\n    name = 'second'\n",
        encoding="utf-8",
    )
    (tmp_path / "one.py").write_text(  # a base class without a name is not a spider
        "import scrapy\n\nclass Base(scrapy.Spider):\n    pass\n\n"
        "class Only(Base):\n    name = 'only'\n",
        encoding="utf-8",
    )
    script = str(Path(sys.executable).parent / "crawlfleet")

    def crawl(spider: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [script, "crawl", spider, "--redis-url", UNREACHABLE],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
        )

    for spider in ("one.py", "two.py:Second", "two:First"):
        line = one_error_line(crawl(spider), 1)
        assert "unreachable" in line, (spider, line)
    line = one_error_line(crawl("two.py"), 2)
    assert line == (
        "crawlfleet crawl: error: 2 Scrapy spider classes in 'two.py' (First, Second): "
        "name one as two.py:Class"
    )
    line = one_error_line(crawl("two.py:Third"), 2)
    assert (
        line == "crawlfleet crawl: error: no class 'Third' in 'two.py' (its spiders: First, Second)"
    )
    line = one_error_line(crawl("missing.py"), 2)
    assert line == "crawlfleet crawl: error: spider file 'missing.py' not found"
