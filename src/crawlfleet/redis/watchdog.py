"""The embedded Redis's watchdog: it shuts Redis down once no process uses it, however
its users ended, ``kill -9`` included.

``python -m crawlfleet.redis.watchdog DATA_DIR PORT`` is started by the process that
starts (or finds unwatched) the Redis of *DATA_DIR* listening on *PORT*, in a session of
its own, so it outlives that process. It holds a shared lock on ``watchdog.lock`` for its
life (so that users can tell that it watches), writes ``watching`` on its stdout, then
every :data:`TICK_SECONDS`:

- if its Redis has ended (stopped by its last user, or died), it exits;
- else, if it gets ``start.lock`` without waiting (a process that starts, joins or leaves
  the Redis holds it: the watchdog asks again at the next tick, and never keeps a user
  waiting longer than one check), and no process holds a share of ``users.lock``, it
  shuts Redis down with SHUTDOWN, which syncs the AOF, and exits.

A user that joins in the meantime takes its share under ``start.lock``, so it either
comes before the check (Redis goes on) or after the shutdown (it starts Redis again). If
the watchdog itself is killed, the Redis runs on while it is used, and without user until
another process uses it: that process starts a new watchdog.
"""

from __future__ import annotations

import fcntl
import logging
import os
import select
import sys
import time
from collections.abc import Callable
from pathlib import Path

from crawlfleet.redis.embedded import WATCHDOG_READY, EmbeddedRedis, server_pid

__all__ = ["TICK_SECONDS", "main", "watch"]

logger = logging.getLogger(__name__)

#: How often the watchdog checks whether its Redis is still used.
TICK_SECONDS = 0.2


def _exit_waiter(pid: int) -> Callable[[float], bool]:
    """A function that waits up to its argument (seconds) for process *pid* to end and
    says whether it has (a pidfd on Linux: woken at once, even if the Redis is another
    process's child; elsewhere polled)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return lambda _timeout: True
    except (AttributeError, OSError):  # not Linux 5.3+: ask the process table
        pidfd = -1
    if pidfd < 0:

        def polled(timeout: float) -> bool:
            time.sleep(timeout)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                pass
            return False

        return polled
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return lambda timeout: bool(poller.poll(int(timeout * 1000)))


def watch(data_dir: Path, port: int) -> int:
    """Watch the embedded Redis of *data_dir* on *port* until it ends or nobody uses it
    (then shut it down); the process's exit status."""
    handle = EmbeddedRedis(data_dir)
    handle.port = port
    (handle.dir / "watchdog.lock").touch()
    with open(handle.dir / "watchdog.lock", "rb") as mark:
        fcntl.flock(mark, fcntl.LOCK_SH)
        pid = server_pid(port)
        ended = _exit_waiter(pid)
        logger.info("Watching embedded Redis pid %d on 127.0.0.1:%d", pid, port)
        os.write(sys.stdout.fileno(), WATCHDOG_READY)
        _detach_stdout()
        while not ended(TICK_SECONDS):
            start = handle.starting_lock(wait=False)
            if start is None:
                continue  # a user is starting, joining or leaving it: next tick
            with start:
                if ended(0):
                    break
                if handle.shutdown_if_unused():
                    logger.info("Its last user is gone: embedded Redis pid %d shut down", pid)
                    return 0
        logger.info("Embedded Redis pid %d has ended", pid)
    return 0


def _detach_stdout() -> None:
    """Point stdout at /dev/null: its reader (the starting process) may be gone."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    """``python -m crawlfleet.redis.watchdog DATA_DIR PORT``; logs go to stderr."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or not args[1].isdigit():
        sys.stderr.write("usage: python -m crawlfleet.redis.watchdog DATA_DIR PORT\n")
        return 2
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s [%(process)d] %(levelname)s: %(message)s"
    )
    try:
        return watch(Path(args[0]), int(args[1]))
    except Exception:
        logger.exception("The watchdog of the embedded Redis on 127.0.0.1:%s failed", args[1])
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
