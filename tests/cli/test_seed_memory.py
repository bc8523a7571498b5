"""``crawlfleet seed`` of a million URLs from a file, measured: a real CLI process, a
real Redis. The file is read and committed in batches, so the CLI's memory does not
grow with it (when it was read whole, 10^6 URLs took 2 GB)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
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


#: Runs the command of its arguments (after the first, a file), then writes its peak RSS
#: (KiB) to that file. A child's ru_maxrss starts at the high-water mark of the process
#: that started it (its memory until exec: a test worker that grew to 270 MB made a
#: 77-MB CLI look 270 MB); this small starter adds its own 10 MB or so at most.
MEASURED = """
import resource, subprocess, sys
code = subprocess.run(sys.argv[2:]).returncode
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
open(sys.argv[1], "w").write(str(peak))
sys.exit(code)
"""


@pytest.mark.slow
def test_a_million_seeds_are_queued_in_flat_memory(
    redis_server_url: str, key_prefix: str, tmp_path: Path
) -> None:
    """10^6 seed lines of 5,000 hosts (30 MB): the CLI's peak RSS stays under
    MAX_RSS_BYTES (it grew with the file when the file was read whole: 2 GB), and every
    seed is queued."""
    n, hosts = 1_000_000, 5_000
    path = tmp_path / "seeds1m.txt"
    _write_seeds(path, n, hosts)
    options = ["--redis-url", redis_server_url, "-s", f"CRAWLFLEET_KEY_PREFIX={key_prefix}"]
    command = [sys.executable, "-m", "crawlfleet.cli.main", "seed", "million", "--file", str(path)]
    out, err, rss = tmp_path / "stdout", tmp_path / "stderr", tmp_path / "rss"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", MEASURED, str(rss), *command, *options],
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            start_new_session=True,
        )
    try:
        proc.wait(240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"not done in 240 s: {err.read_text()[-500:]}")
    peak = int(rss.read_text()) * 1024
    stderr_text = err.read_text()
    assert peak <= MAX_RSS_BYTES, f"peak RSS {peak / 2**20:.0f} MiB: {stderr_text[-500:]}"
    assert proc.returncode == 0, f"exit {proc.returncode}: {stderr_text[-2000:]}"
    assert stderr_text.endswith(f"job million: {n} queued, 0 already seen, 0 invalid\n")
    assert "seeding job million: " in stderr_text  # progress, on a run of many seconds
    r = cli("job", "status", "million", "--json", *options, cwd=ROOT)
    figures = json.loads(r.stdout)
    assert (figures["queued"], figures["sites"]) == (n, hosts), r.stderr
