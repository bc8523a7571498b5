"""The benchmark's CPU measurement: the kernel's count for each crawling process."""

from __future__ import annotations

import subprocess
import sys
import time

from crawlfleet.benchmark.crawl import wait_measured

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def test_wait_measured_counts_the_cpu_of_each_process_and_its_exit_code() -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", BURN.format(s=0.3)]),
        subprocess.Popen([sys.executable, "-c", BURN.format(s=0.2) + "raise SystemExit(3)"]),
    ]
    codes, cpu = wait_measured(procs, 30)
    assert codes == [0, 3]
    assert [p.poll() for p in procs] == [0, 3]  # reaped, and Popen knows it
    assert 0.5 <= cpu < 2.0


def test_wait_measured_leaves_a_process_that_outlives_the_timeout() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        codes, cpu = wait_measured([proc], 0.3)
        assert codes == [None] and cpu == 0.0
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_a_process_seen_exited_is_left_for_wait_measured_to_reap() -> None:
    from crawlfleet.benchmark.crawl import _exited

    proc = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.1) + "raise SystemExit(4)"])
    assert not _exited(proc.pid)
    deadline = time.monotonic() + 30
    while not _exited(proc.pid):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    codes, cpu = wait_measured([proc], 30)  # not reaped by the look: its code and CPU
    assert codes == [4] and cpu >= 0.05
