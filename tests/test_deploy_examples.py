"""The deployment examples (examples/deploy) stay true: their commands parse with
crawlfleet's own command line, the config file is one crawlfleet reads, and systemd
accepts the unit."""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from crawlfleet.cli.main import build_parser
from crawlfleet.cli.options import read_config_file

DEPLOY = Path(__file__).resolve().parents[1] / "examples" / "deploy"
BUNDLE = "/opt/crawlfleet/crawlfleet-node.pyz"


def parses(argv: list[str]) -> argparse.Namespace:
    """*argv* (after the bundle's path) is a crawlfleet command line (SystemExit if not):
    what it parses to."""
    return build_parser(argv[0]).parse_args(argv)


def test_the_compose_file_runs_crawlfleet_commands() -> None:
    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    for name in ("manager", "node"):
        command = services[name]["command"]
        assert command[:2] == ["python", BUNDLE], name
        parses(command[2:])
        assert f"./crawlfleet-node.pyz:{BUNDLE}:ro" in services[name]["volumes"]


def test_the_unit_runs_a_crawlfleet_command_and_systemd_accepts_it(tmp_path: Path) -> None:
    unit = (DEPLOY / "crawlfleet-node@.service").read_text()
    start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    argv = shlex.split(start.removeprefix("ExecStart="))
    assert argv[:2] == ["/usr/bin/python3", BUNDLE]
    values = {"${SPIDER}": "books", "%i": "books", "${PROCESSES}": "4"}
    parsed = parses([values.get(a, a) for a in argv[2:]])
    assert parsed.processes == 4
    assert "Environment=PROCESSES=1" in unit.splitlines()  # one node unless told
    assert "KillMode=mixed" in unit.splitlines()  # the stop goes to the command only
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed: the unit's syntax is not checked")
    shutil.copy(DEPLOY / "crawlfleet-node@.service", tmp_path)
    r = subprocess.run(
        ["systemd-analyze", "verify", "./crawlfleet-node@books.service"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    # systemd says what it ignores (a misspelt key or value) on stderr, exit 0 or not
    complaints = [line for line in r.stderr.splitlines() if "crawlfleet-node@" in line]
    assert complaints == [], r.stderr


def test_the_example_config_is_read() -> None:
    values = read_config_file(DEPLOY / "node.toml")
    assert values["CRAWLFLEET_RATE_LIMITS"] == {"*": "2/1s"}
    assert values["CONCURRENT_REQUESTS"] == 32
