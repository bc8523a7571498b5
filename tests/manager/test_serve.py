"""``crawlfleet manager serve|token`` as an operator runs them: a real uvicorn on
loopback, tokens made on the command line, one-line errors."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from crawlfleet.redis.embedded import free_port
from tests.support.manager import manager_command
from tests.support.paths import ROOT


def test_tokens_on_the_command_line(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'state.sqlite3'}"
    made = manager_command("token", "create", "ops", "--role", "operator", db=db)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]
    assert token.startswith("cft_")
    listed = manager_command("token", "list", db=db)
    assert "ops" in listed.stdout and "operator" in listed.stdout and token not in listed.stdout
    twice = manager_command("token", "create", "ops", "--role", "viewer", db=db)
    assert twice.returncode == 2
    assert twice.stderr.strip().splitlines() == [
        "crawlfleet manager token create: error: an active token is already named 'ops' "
        "(revoke it first)"
    ]
    assert manager_command("token", "revoke", "ops", db=db).returncode == 0
    assert "no tokens" in manager_command("token", "list", db=db).stdout
    assert "ops" in manager_command("token", "list", "--all", db=db).stdout
    gone = manager_command("token", "revoke", "ops", db=db)
    assert gone.returncode == 2 and "no active token named 'ops'" in gone.stderr


def test_an_unreachable_state_db_is_one_line_without_its_password(tmp_path: Path) -> None:
    r = manager_command("token", "list", db="postgresql+psycopg://cf:s3cr3t@127.0.0.1:1/state")
    assert r.returncode == 1
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("crawlfleet manager token list: error: state DB ")
    assert "cf:***@127.0.0.1:1/state unusable" in line and "s3cr3t" not in line
    bad = manager_command("token", "list", db="definitely not a url")
    assert bad.returncode == 2 and "is not a database URL" in bad.stderr


def test_serve_answers_on_loopback_and_stops_on_ctrl_c(
    tmp_path: Path, redis_server_url: str, key_prefix: str
) -> None:
    db = f"sqlite:///{tmp_path / 'state.sqlite3'}"
    token = manager_command("token", "create", "ci", "--role", "viewer", db=db).stdout.split()[-1]
    port = free_port()
    log = tmp_path / "manager.log"
    argv = [sys.executable, "-m", "crawlfleet.cli.main", "manager", "serve"]
    argv += ["--port", str(port), "--db", db, "--redis-url", redis_server_url]
    argv += ["-s", f"CRAWLFLEET_KEY_PREFIX={key_prefix}"]
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                health = httpx.get(f"{base}/healthz", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        assert health.status_code == 200 and health.json()["status"] == "ok"
        assert httpx.get(f"{base}/api/v1/jobs").status_code == 401
        jobs = httpx.get(f"{base}/api/v1/jobs", headers={"Authorization": f"Bearer {token}"})
        assert jobs.status_code == 200 and jobs.json() == {"jobs": []}
        # a second manager on the same port: one line, not a traceback
        taken = subprocess.run(
            [*argv[:5], "--port", str(port), "--db", db, "--redis-url", redis_server_url],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert taken.returncode == 2, taken.stderr
        assert f"could not serve on 127.0.0.1:{port}" in taken.stderr
        assert "Traceback" not in taken.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(15)
    text = log.read_text()
    assert code == 0, text
    assert token not in text and "Traceback" not in text
    assert f"manager on http://127.0.0.1:{port}" in text
