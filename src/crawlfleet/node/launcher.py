"""Starting node processes on this machine (for the demo, the benchmark and tests).

A node is an ordinary ``crawlfleet crawl`` process; this module only builds its command
line and environment. Supervision in production belongs to Scrapyd, systemd, etc.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

__all__ = [
    "MAX_PROCESSES",
    "node_command",
    "numbered",
    "preload",
    "run_processes",
    "start_node",
    "usable_cpus",
    "wait_all",
]


def node_command(
    spider: str,
    *,
    job: str,
    redis_url: str,
    spider_args: Mapping[str, str] | None = None,
    settings: Mapping[str, Any] | None = None,
    output: str | os.PathLike[str] | None = None,
    processes: int = 1,
) -> list[str]:
    """The command line of ``crawlfleet crawl`` for these arguments (*processes* > 1:
    that many nodes from the one command, see :func:`run_processes`)."""
    cmd = [
        sys.executable,
        "-m",
        "crawlfleet.cli.main",
        "crawl",
        spider,
        "--job",
        job,
        "--redis-url",
        redis_url,
    ]
    for name, value in (spider_args or {}).items():
        cmd += ["-a", f"{name}={value}"]
    for name, value in (settings or {}).items():
        cmd += ["-s", f"{name}={value}"]
    if output is not None:
        cmd += ["-o", str(output)]
    if processes != 1:
        cmd += ["--processes", str(processes)]
    return cmd


def start_node(
    spider: str,
    *,
    job: str,
    redis_url: str,
    log: str | os.PathLike[str] | None = None,
    spider_args: Mapping[str, str] | None = None,
    settings: Mapping[str, Any] | None = None,
    output: str | os.PathLike[str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    processes: int = 1,
) -> subprocess.Popen[bytes]:
    """Start one node process (*processes* > 1: one command running that many nodes,
    each writing its own numbered *output*); its stdout/stderr go to *log* (or are
    discarded)."""
    env = dict(os.environ)
    env.pop("CRAWLFLEET_REDIS_URL", None)  # the explicit --redis-url decides
    env.update(extra_env or {})
    sink: IO[bytes] | int = subprocess.DEVNULL
    if log is not None:
        sink = open(Path(log), "ab")  # noqa: SIM115 - owned by the child from here on
    try:
        return subprocess.Popen(
            node_command(
                spider,
                job=job,
                redis_url=redis_url,
                spider_args=spider_args,
                settings=settings,
                output=output,
                processes=processes,
            ),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
        )
    finally:
        if not isinstance(sink, int):
            sink.close()


def wait_all(procs: Sequence[subprocess.Popen[bytes]], timeout: float) -> list[int | None]:
    """Exit codes of *procs*, waiting at most *timeout* seconds in all (None: still up)."""
    import time

    deadline = time.monotonic() + timeout
    codes: list[int | None] = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(0.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append(None)
    return codes


#: ``crawlfleet crawl --processes``: at most this many nodes from one command
MAX_PROCESSES = 64


def usable_cpus() -> int:
    """The CPUs this process may run on (``--processes auto``): its affinity, which
    ``taskset``, a container's ``--cpuset-cpus`` or systemd's ``CPUAffinity=`` narrow.
    A CPU quota (a container's ``--cpus``, systemd's ``CPUQuota=``) is not read."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity on this system
        return max(1, os.cpu_count() or 1)


#: Settings that name the classes a node builds (dicts by class path, and one path each;
#: in DOWNLOAD_HANDLERS, FEED_STORAGES and FEED_EXPORTERS the path is the value)
_CLASS_DICTS = ("DOWNLOADER_MIDDLEWARES", "SPIDER_MIDDLEWARES", "EXTENSIONS", "ITEM_PIPELINES")
_VALUE_DICTS = ("DOWNLOAD_HANDLERS", "FEED_STORAGES", "FEED_EXPORTERS")
_CLASS_PATHS = (
    "SCHEDULER",
    "DUPEFILTER_CLASS",
    "STATS_CLASS",
    "REQUEST_FINGERPRINTER_CLASS",
    "DOWNLOADER",
    "LOG_FORMATTER",
    "TWISTED_REACTOR",
)
#: Scrapy's own parts that every crawl imports once it starts
_SCRAPY_MODULES = ("scrapy.core.engine", "scrapy.core.scraper", "scrapy.core.downloader")


def preload(settings: Any) -> None:
    """Import what a node built from *settings* (a Scrapy ``Settings`` with the add-on
    applied) will import as it starts: its components, handlers and Scrapy's engine.
    Done once before :func:`run_processes` forks, the nodes share that work (and the
    memory it fills) instead of each doing it again. A path that does not import is
    left to the node, which reports it as it would alone. (A module that opens a
    connection or starts a thread as it is imported does so here, once, before the
    fork, as under any server that preloads its application.)"""
    import importlib

    from scrapy.utils.misc import load_object

    paths: list[Any] = []
    for name in _CLASS_DICTS:
        for suffix in ("", "_BASE"):
            paths += list(settings.getdict(name + suffix))
    for name in _VALUE_DICTS:
        for suffix in ("", "_BASE"):
            paths += list(settings.getdict(name + suffix).values())
    paths += [settings.get(name) for name in _CLASS_PATHS]
    for path in paths:
        if not isinstance(path, str) or "." not in path:
            continue  # a class given as an object is imported already; None: turned off
        try:
            if path.startswith("twisted.internet.") and path.endswith("Reactor"):
                importlib.import_module(path.rpartition(".")[0])  # installed by the node
            else:
                load_object(path)
        except Exception:  # the node says what is wrong, as it would alone
            continue
    for module in _SCRAPY_MODULES:
        importlib.import_module(module)


def numbered(path: str, index: int) -> str:
    """*path* for process *index* of several: the number before the suffix
    (``items.jsonl`` -> ``items.2.jsonl``; ``out`` -> ``out.2``)."""
    head, sep, name = path.rpartition("/")
    stem, dot, suffix = name.rpartition(".")
    if not dot or not stem:
        return f"{path}.{index}"
    return f"{head}{sep}{stem}.{index}.{suffix}"


#: the signals the command hands on to its nodes (each once, as it gets them), as what:
#: a hang-up stops them as SIGTERM does (the command outlives them, and then releases
#: what it holds for them, such as the embedded Redis)
_PASSED_ON = {
    signal.SIGINT: signal.SIGINT,
    signal.SIGTERM: signal.SIGTERM,
    signal.SIGHUP: signal.SIGTERM,
}


def run_processes(count: int, body: Callable[[int], int]) -> int:
    """Run ``body(index)`` for index 1..*count*, each in a process forked from this one,
    and wait for them all. Returns 2 if any returned 2 (a setting refused), else 1 if
    any failed (or died of a signal), else 0.

    Each process is a group of its own, so a Ctrl-C at the terminal reaches this one
    only: SIGINT and SIGTERM are handed on to every process still running, once each as
    they come (the first stops the nodes gracefully, a second forces them, as for one
    node), and SIGHUP as SIGTERM. A signal that comes while the processes are being
    forked waits until they all are, then is handed on to each. If this process dies
    without handing on (SIGKILL), the nodes get SIGTERM (Linux). A node's process can
    still be stopped alone, by its own pid."""
    children: dict[int, int] = {}
    parent = os.getpid()

    def pass_on(signum: int, _frame: object) -> None:
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, _PASSED_ON[signal.Signals(signum)])

    sys.stdout.flush()
    sys.stderr.flush()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _PASSED_ON)
    previous = {sig: signal.signal(sig, pass_on) for sig in _PASSED_ON}
    try:
        for index in range(1, count + 1):
            pid = os.fork()
            if pid == 0:  # the node: it never returns into this function
                _run_node(index, body, parent, previous, mask)
            children[pid] = index
            with contextlib.suppress(OSError):  # as the node does: whichever runs first
                os.setpgid(pid, pid)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # what came meanwhile: handed on
    codes: list[int] = []
    try:
        while children:
            pid, status = os.wait()
            if children.pop(pid, None) is not None:
                codes.append(os.waitstatus_to_exitcode(status))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if 2 in codes:
        return 2
    return 1 if any(codes) else 0


def _run_node(
    index: int,
    body: Callable[[int], int],
    parent: int,
    handlers: Mapping[signal.Signals, Any],
    mask: Iterable[int],
) -> NoReturn:
    """In a forked process: the signal handlers of a process started alone (not the
    command's hand-on), a group of its own, SIGTERM when the command dies; then
    ``body(index)``, and exit with its status."""
    code = 1
    try:
        for sig, handler in handlers.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        os.setpgid(0, 0)
        _term_on_parent_death()
        if os.getppid() != parent:  # it died before the line above: no node
            raise SystemExit(1)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        code = body(index)
    except SystemExit as exc:
        code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # printed: the node's own log, which its nodes share
        import traceback

        sys.stderr.write(f"crawlfleet: node {index} failed:\n")
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _term_on_parent_death() -> None:
    """Ask Linux to send this process SIGTERM when its parent dies (prctl's
    PR_SET_PDEATHSIG); elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
