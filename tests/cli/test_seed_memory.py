"""``crawlfleet seed`` of a million URLs from a file, measured: a real CLI process, a
real Redis. The file is read and committed in batches, so the CLI's memory does not
grow with it (when it was read whole, 10^6 URLs took 2 GB)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import cli

ROOT = Path(__file__).resolve().parents[2]

#: The CLI's peak resident memory seeding a million URLs, at most.
MAX_RSS_BYTES = 200 * 2**20


def _write_seeds(path: Path, n: int, hosts: int) -> None:
    with path.open("w") as f:
        for start in range(0, n, 10_000):
            f.write(
                "".join(
                    f"https://h{i % hosts}.example/p/{i}\n"
                    for i in range(start, min(n, start + 10_000))
                )
            )


def _peak_rss(pid: int) -> int:
    """VmHWM of live process *pid*, in bytes (0 once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


@pytest.mark.slow
def test_a_million_seeds_are_queued_in_flat_memory(
    redis_server_url: str, key_prefix: str, tmp_path: Path
) -> None:
    """10^6 seed lines of 5,000 hosts (30 MB): the CLI's peak RSS stays under
    MAX_RSS_BYTES (it grew with the file when the file was read whole: 2 GB), and every
    seed is queued. The run is stopped as soon as its peak passes the bound."""
    n, hosts = 1_000_000, 5_000
    path = tmp_path / "seeds1m.txt"
    _write_seeds(path, n, hosts)
    options = ["--redis-url", redis_server_url, "-s", f"CRAWLFLEET_KEY_PREFIX={key_prefix}"]
    command = [sys.executable, "-m", "crawlfleet.cli.main", "seed", "million", "--file", str(path)]
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            [*command, *options],
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
        )
    deadline = time.monotonic() + 240
    peak = 0
    while True:
        pid, wait_status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:  # reaped here, with its own rusage: ru_maxrss is its peak (KiB on Linux)
            proc.returncode = os.waitstatus_to_exitcode(wait_status)
            peak = max(peak, usage.ru_maxrss * 1024)
            break
        peak = max(peak, _peak_rss(proc.pid))
        if peak > MAX_RSS_BYTES or time.monotonic() > deadline:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            break
        time.sleep(0.2)
    stderr_text = err.read_text()
    assert peak <= MAX_RSS_BYTES, f"peak RSS {peak / 2**20:.0f} MiB: {stderr_text[-500:]}"
    assert proc.returncode == 0, f"exit {proc.returncode}: {stderr_text[-2000:]}"
    assert stderr_text.endswith(f"job million: {n} queued, 0 already seen, 0 invalid\n")
    assert "seeding job million: " in stderr_text  # progress, on a run of many seconds
    r = cli("job", "status", "million", "--json", *options, cwd=ROOT)
    figures = json.loads(r.stdout)
    assert (figures["queued"], figures["sites"]) == (n, hosts), r.stderr
