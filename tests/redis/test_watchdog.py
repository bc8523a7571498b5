"""The embedded Redis lives exactly as long as some process uses it, however its users
end: when every one is killed (``kill -9``: nobody releases it), its watchdog shuts it
down, AOF synced; a Redis found with neither user nor watchdog is adopted, and said so."""

from __future__ import annotations

import contextlib
import logging
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import redis

from crawlfleet.redis.embedded import EmbeddedRedis
from tests.redis.test_embedded_stop import bare_env, command, kill_if_left, running
from tests.support.waiting import poll

#: A Redis whose users are all gone goes within this (the watchdog checks 5 times a second).
GONE_SECONDS = 10.0
#: A user process starts (and starts Redis and its watchdog) within this.
START_SECONDS = 30.0

#: A process that uses the embedded Redis of argv[1] (and sets argv[2], "key=value"),
#: prints its URL, and releases it when a line (or the end) comes on its stdin.
USER = """
import logging, sys
import redis
from crawlfleet.redis.embedded import EmbeddedRedis
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
handle = EmbeddedRedis(sys.argv[1])
url = handle.acquire()
if len(sys.argv) > 2:
    redis.Redis.from_url(url).set(*sys.argv[2].split("=", 1))
print(url, flush=True)
sys.stdin.readline()
print(handle.release(), flush=True)
"""

LEFT_BEHIND = "left running with no process using it or watching it"


class User:
    """A process using the embedded Redis of *data_dir*, once it has acquired it."""

    def __init__(self, data_dir: Path, *setting: str) -> None:
        self.log = data_dir.parent / f"user-{time.monotonic_ns()}.log"
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", USER, str(data_dir), *setting],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        assert self.proc.stdout is not None
        answered, _, _ = select.select([self.proc.stdout], [], [], START_SECONDS)
        url = self.proc.stdout.readline().decode() if answered else ""
        assert url.startswith("redis://"), self.log.read_text()
        self.url = url.strip()
        self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])

    def release(self) -> str:
        """Release normally and exit; what release() returned."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(b"\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().decode().strip()
        assert self.proc.wait(START_SECONDS) == 0, self.log.read_text()
        return answer

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(START_SECONDS)

    def said(self) -> str:
        return self.log.read_text()


def soon(done: Callable[[], bool]) -> bool:
    """Whether *done()* comes true within GONE_SECONDS."""
    return poll(done, GONE_SECONDS)


def gone_soon(pid: int) -> bool:
    return soon(lambda: not running(pid))


def pid_of(port: int) -> int:
    """The process id of the Redis on 127.0.0.1:*port*, as it says itself."""
    with redis.Redis(port=port, socket_timeout=5) as client:
        return int(client.info("server")["process_id"])


def watchdogs(data_dir: Path) -> list[psutil.Process]:
    """The running watchdogs of the embedded Redis of *data_dir*."""
    where = str(data_dir.resolve())
    return [
        proc
        for proc in psutil.process_iter(["cmdline"])
        if {"crawlfleet.redis.watchdog", where} <= set(proc.info["cmdline"] or ())
        and running(proc.pid)
    ]


@contextlib.contextmanager
def cleaned_up(data_dir: Path, *users: User) -> Iterator[list[int]]:
    """Whatever a failed test leaves: its users, the Redis pids put in the list yielded,
    the data directory's watchdogs."""
    pids: list[int] = []
    try:
        yield pids
    finally:
        for user in users:
            if user.proc.poll() is None:
                user.kill()
        for each in watchdogs(data_dir):
            with contextlib.suppress(psutil.Error):
                each.kill()
        for pid in pids:
            kill_if_left(pid)


def test_a_killed_user_stops_its_redis_and_loses_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    user = User(data, "written=before the kill")
    with cleaned_up(data, user) as pids:
        pid = pid_of(user.port)
        pids.append(pid)
        user.kill()  # nobody releases it
        assert gone_soon(pid), user.said()
        assert soon(lambda: not watchdogs(data))  # the watchdog went with it
        again = EmbeddedRedis(data)
        url = again.acquire()  # started again, from the AOF the shutdown synced
        try:
            assert redis.Redis.from_url(url).get("written") == b"before the kill"
        finally:
            assert again.release() is True


def test_a_redis_lives_while_any_user_lives_however_the_others_ended(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = User(data)
    second = User(data)  # joins it
    with cleaned_up(data, first, second) as pids:
        assert second.url == first.url
        pid = pid_of(first.port)
        pids.append(pid)
        assert first.release() == "False"  # the second still uses it
        time.sleep(1)  # five times what the watchdog takes to see a Redis unused
        assert running(pid)
        assert redis.Redis.from_url(second.url).ping()
        second.kill()
        assert gone_soon(pid), second.said()
        assert soon(lambda: not watchdogs(data))


def left_behind(data: Path) -> tuple[int, int]:
    """A Redis that a user killed with its watchdog left: its port and pid."""
    user = User(data, "left=behind")
    with cleaned_up(data, user):
        pid = pid_of(user.port)
        for watchdog in watchdogs(data):
            watchdog.send_signal(signal.SIGKILL)
        user.kill()
        time.sleep(1)  # no one watches it: it runs on, as a Redis did before watchdogs
        assert running(pid), user.said()
    return user.port, pid


def test_a_command_that_adopts_a_redis_left_behind_says_so_and_stops_it(
    tmp_path: Path,
) -> None:
    data = tmp_path / ".crawlfleet"  # the default data directory of a command run here
    port, pid = left_behind(data)
    try:
        done = subprocess.run(
            command("health"),
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=bare_env(),
            timeout=START_SECONDS,
        )
        assert done.returncode == 0, done.stderr
        said = [line for line in done.stderr.splitlines() if LEFT_BEHIND in line]
        assert len(said) == 1, done.stderr
        assert f"127.0.0.1:{port} (pid {pid}, data in {(data / 'redis').resolve()})" in said[0]
        assert "adopting it" in said[0]
        assert gone_soon(pid), done.stderr  # it was its last user
    finally:
        kill_if_left(pid)


def test_an_adopted_redis_is_said_once_and_watched_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    port, pid = left_behind(data)
    first = User(data)
    second = User(data)
    with cleaned_up(data, first, second) as pids:
        pids.append(pid)
        assert first.port == second.port == port
        assert pid_of(port) == pid
        assert LEFT_BEHIND in first.said()
        assert LEFT_BEHIND not in second.said()  # it was no longer left behind
        assert len(watchdogs(data)) == 1  # the first started one again, the second none
        first.kill()
        second.kill()
        assert gone_soon(pid), first.said()
        again = EmbeddedRedis(data)
        with caplog.at_level(logging.INFO, logger="crawlfleet.redis.embedded"):
            again.acquire()  # nothing left: a fresh start, said by no warning
        try:
            assert redis.Redis.from_url(again.url).get("left") == b"behind"
        finally:
            again.release()
        assert "Started embedded Redis" in caplog.text
        assert LEFT_BEHIND not in caplog.text
