"""Starting node processes on this machine (for the demo, the benchmark and tests).

A node is an ordinary ``crawlfleet crawl`` process; this module only builds its command
line and environment. Supervision in production belongs to Scrapyd, systemd, etc.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = ["node_command", "start_node", "wait_all"]


def node_command(
    spider: str,
    *,
    job: str,
    redis_url: str,
    spider_args: Mapping[str, str] | None = None,
    settings: Mapping[str, Any] | None = None,
    output: str | os.PathLike[str] | None = None,
) -> list[str]:
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
) -> subprocess.Popen[bytes]:
    """Start one node process; its stdout/stderr go to *log* (or are discarded)."""
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
