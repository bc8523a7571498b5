"""The test site in a process of its own, so that it never shares a GIL with a crawler.

:func:`start_site_process` runs ``python -m crawlfleet.cli.site`` (the ``crawlfleet site``
command) and returns once the site serves; :func:`fetch_stats` and :func:`reset_stats`
talk to its ``/_stats`` and ``/_reset`` endpoints, :func:`fetch_change_stats` reads a
changing site's freshness figures.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import IO, Any

from crawlfleet.testsite.archive import category_names
from crawlfleet.testsite.changelog import ChangeStats
from crawlfleet.testsite.changing import Changing
from crawlfleet.testsite.hostile import Hostile
from crawlfleet.testsite.model import SiteModel, host_address

__all__ = [
    "fetch_change_stats",
    "fetch_stats",
    "reset_stats",
    "site_command",
    "start_site_process",
    "stop_site_process",
]

_File = int | IO[Any] | None
# Loopback must never go through an HTTP proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def site_command(
    model: SiteModel,
    *,
    port: int = 0,
    latency_seconds: float = 0.0,
    timeout_seconds: float = 30.0,
    port_file: Path | None = None,
    python: str | None = None,
    hostile: Hostile | None = None,
    changing: Changing | None = None,
    stall_tick_seconds: float = 0.0,
) -> list[str]:
    """The argv that serves ``model`` (its archive too) with these options."""
    argv = [
        python or sys.executable,
        "-m",
        "crawlfleet.cli.site",
        f"--pages={model.pages}",
        f"--hosts={model.hosts}",
        f"--seed={model.seed}",
        f"--links-per-page={model.links_per_page}",
        f"--articles={model.articles}",
        f"--latency={latency_seconds!r}",
        f"--timeout-seconds={timeout_seconds!r}",
        f"--port={port}",
    ]
    if not model.problems:
        argv.append("--no-problems")
    if model.menu_pages:
        argv.append(f"--menu-pages={model.menu_pages}")
    archive = model.archive
    if archive:
        if archive.categories != category_names(len(archive.categories)):
            raise ValueError(
                "archive_categories must be c00, c01, ... to be served by the site command"
            )
        argv += [
            f"--archive-dates={len(archive.dates)}",
            f"--archive-categories={len(archive.categories)}",
            f"--archive-start={model.archive_start.isoformat()}",
        ]
    if hostile is not None and hostile != Hostile():
        argv += [
            f"--ban-rate={hostile.ban_rate}",
            f"--ban-seconds={hostile.ban_seconds!r}",
            f"--ban-by={hostile.ban_by}",
            f"--flaky={hostile.flaky!r}",
            f"--flaky-attempts={hostile.flaky_attempts}",
            f"--flaky-kinds={','.join(hostile.flaky_kinds)}",
        ]
    if changing is not None:
        argv += [
            "--changing",
            f"--time-scale={changing.time_scale!r}",
            f"--validators={changing.validators!r}",
            f"--change-mix={changing.spec}",
        ]
    if stall_tick_seconds:
        argv.append(f"--stall-tick-ms={stall_tick_seconds * 1000!r}")
    if port_file is not None:
        argv.append(f"--port-file={port_file}")
    return argv


def start_site_process(
    model: SiteModel | None = None,
    *,
    port: int = 0,
    latency_seconds: float = 0.0,
    timeout_seconds: float = 30.0,
    startup_timeout: float = 60.0,
    python: str | None = None,
    hostile: Hostile | None = None,
    changing: Changing | None = None,
    stall_tick_seconds: float = 0.0,
    stdout: _File = subprocess.DEVNULL,
    stderr: _File = None,
) -> tuple[subprocess.Popen[bytes], int]:
    """Start the site for ``model`` (default: ``SiteModel()``) in a child process,
    hostile as ``hostile`` says (default: not at all).

    Returns ``(process, port)`` once the site accepts connections. Raises
    :class:`RuntimeError` if the process exits first and :class:`TimeoutError` (after
    killing it) if it is not serving within ``startup_timeout`` seconds. Stop it with
    :func:`stop_site_process`. The child's logs go to ``stderr`` (inherited by default).
    ``changing`` (default: none) makes its content pages change;
    ``stall_tick_seconds`` > 0 has it note its own event-loop stalls (``loop_stalls``).
    """
    model = model if model is not None else SiteModel()
    workdir = Path(tempfile.mkdtemp(prefix="crawlfleet-site-"))
    port_file = workdir / "port"
    argv = site_command(
        model,
        port=port,
        latency_seconds=latency_seconds,
        timeout_seconds=timeout_seconds,
        port_file=port_file,
        python=python,
        hostile=hostile,
        changing=changing,
        stall_tick_seconds=stall_tick_seconds,
    )
    proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr)
    try:
        deadline = time.monotonic() + startup_timeout
        while time.monotonic() < deadline:
            if port_file.exists():
                return proc, int(port_file.read_text())
            status = proc.poll()
            if status is not None:
                raise RuntimeError(f"the test site exited with status {status} before serving")
            time.sleep(0.02)
        stop_site_process(proc, timeout=5.0)
        raise TimeoutError(f"the test site was not serving after {startup_timeout} s")
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        raise
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def stop_site_process(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> int:
    """SIGTERM, then SIGKILL after ``timeout`` seconds; returns the exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def fetch_stats(
    port: int,
    *,
    host: int = 0,
    brief: bool = False,
    arrivals: bool = False,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """``GET /_stats`` of the site on ``port`` (shape: :mod:`crawlfleet.testsite.server`);
    *arrivals*: with each host's arrival times."""
    flags = [name for name, on in (("brief", brief), ("arrivals", arrivals)) if on]
    query = "?" + "&".join(f"{name}=1" for name in flags) if flags else ""
    url = f"http://{host_address(host)}:{port}/_stats{query}"
    with _OPENER.open(url, timeout=timeout) as response:
        result: dict[str, Any] = json.load(response)
    return result


def fetch_change_stats(port: int, *, host: int = 0, timeout: float = 30.0) -> ChangeStats:
    """The freshness figures of the changing site on ``port``; ``ValueError`` if the
    site does not change."""
    return ChangeStats.from_stats(fetch_stats(port, host=host, brief=True, timeout=timeout))


def reset_stats(port: int, *, host: int = 0, timeout: float = 10.0) -> None:
    """``POST /_reset``: clear the site's counters."""
    url = f"http://{host_address(host)}:{port}/_reset"
    request = urllib.request.Request(url, data=b"", method="POST")
    with _OPENER.open(request, timeout=timeout) as response:
        response.read()
