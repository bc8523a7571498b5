"""The command line as tests use it: ``crawlfleet ...`` run as a process in a Scrapy
project made for the test, a command module's options parsed without a process, and
the one line a failed command must print.

:data:`UNREACHABLE` is a Redis URL nothing answers at, with a password that must never
be printed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from pathlib import Path

__all__ = [
    "UNREACHABLE",
    "cli",
    "make_project",
    "one_error_line",
    "parse_command",
    "redis_options",
]

#: A loopback port nothing listens on, with a password that must never be printed.
UNREACHABLE = "redis://:s3cr3t-pw@127.0.0.1:1/0"


def cli(
    *args: str, cwd: Path, timeout: float = 60.0, **env: str
) -> subprocess.CompletedProcess[str]:
    """``crawlfleet ARGS`` in *cwd*, with *env* and none of the caller's ``SCRAPY_*`` and
    ``CRAWLFLEET_*`` variables; fails after *timeout* seconds."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SCRAPY_", "CRAWLFLEET_"))}
    return subprocess.run(
        [sys.executable, "-m", "crawlfleet.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        env={**environ, **env},
    )


def make_project(root: Path, settings: str) -> Path:
    """A Scrapy project in *root* with the add-on: scrapy.cfg, proj/settings.py ending
    with *settings* (dedented); returns the path of settings.py."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "scrapy.cfg").write_text("[settings]\ndefault = proj.settings\n")
    (root / "proj" / "spiders").mkdir(parents=True)
    (root / "proj" / "__init__.py").write_text("")
    (root / "proj" / "spiders" / "__init__.py").write_text("")
    (root / "proj" / "settings.py").write_text(
        'BOT_NAME = "proj"\nSPIDER_MODULES = ["proj.spiders"]\n'
        'ADDONS = {"crawlfleet.Addon": 100}\n' + textwrap.dedent(settings)
    )
    return root / "proj" / "settings.py"


def one_error_line(r: subprocess.CompletedProcess[str], status: int = 1) -> str:
    """The single line a failed command printed (asserting everything else)."""
    output = (r.stdout + r.stderr).strip()
    assert r.returncode == status, output
    assert "Traceback" not in output and "s3cr3t" not in output, output
    lines = output.splitlines()
    assert len(lines) == 1, output
    return lines[0]


def parse_command(module: object, *argv: str) -> argparse.Namespace:
    """*argv* parsed by the options of the command module *module* (its
    ``add_arguments``), as ``crawlfleet`` parses them."""
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)  # type: ignore[attr-defined]
    return parser.parse_args(list(argv))


def redis_options(url: str, prefix: str) -> list[str]:
    """The options of a command that talks to the Redis at *url* under key prefix
    *prefix*."""
    return ["--redis-url", url, "-s", f"CRAWLFLEET_KEY_PREFIX={prefix}"]
