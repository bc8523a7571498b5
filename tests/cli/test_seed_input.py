"""``crawlfleet seed`` on large and streamed input, end to end: real processes, real Redis.
Entries are read and committed in batches (crawlfleet.fleet.seeds.BATCH), so that
memory stays flat in their number."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from crawlfleet.cli.seed import CHUNK
from crawlfleet.fleet.seeds import BATCH, INVALID_KEPT

ROOT = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "crawlfleet.cli.main"]


def cli(*args: str, stdin: str | bytes = b"") -> subprocess.CompletedProcess[str]:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    r = subprocess.run([*COMMAND, *args], capture_output=True, input=data, timeout=120, cwd=ROOT)
    return subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(), r.stderr.decode())


def seed(*args: str, stdin: str | bytes = b"") -> subprocess.CompletedProcess[str]:
    return cli("seed", *args, stdin=stdin)


def common(redis_url: str, prefix: str) -> list[str]:
    return ["--redis-url", redis_url, "-s", f"CRAWLFLEET_KEY_PREFIX={prefix}"]


def status(redis_url: str, prefix: str, job: str) -> dict[str, object]:
    r = cli("job", "status", job, "--json", *common(redis_url, prefix))
    assert r.returncode == 0, r.stderr
    loaded: dict[str, object] = json.loads(r.stdout)
    return loaded


def test_arguments_files_and_stdin_are_numbered_and_batched_as_one_stream(
    redis_server_url: str, key_prefix: str, tmp_path: Path
) -> None:
    # the file's entries straddle batch edges: an invalid entry and a duplicate of the
    # first batch's first seed right after the first batch, the last seed alone in a batch
    urls = [f"https://s{i % 7}.example/{i}" for i in range(BATCH * 2 + 1)]
    lines = ["# seeds", "", *urls[:BATCH], "not a url", urls[0], *urls[BATCH:]]
    path = tmp_path / "seeds.txt"
    path.write_text("\r\n".join(lines))  # the last line without its end, as stdin's
    stdin = f"{urls[-1]}\nftp://x.example/\nhttps://stdin.example/"
    r = seed(
        "streamed",
        "https://arg.example/",
        "--file",
        str(path),
        "--file",
        "-",
        *common(redis_server_url, key_prefix),
        stdin=stdin,
    )
    assert r.returncode == 1, r.stderr  # invalid entries
    # numbered across the stream: 1 argument, then the file's entries, then stdin's
    assert f"seed {BATCH + 2} skipped: 'not a url'" in r.stderr
    assert f"seed {len(urls) + 5} skipped: 'ftp://x.example/'" in r.stderr
    queued = 1 + len(urls) + 1
    assert r.stderr.endswith(f"job streamed: {queued} queued, 2 already seen, 2 invalid\n")
    assert "seeding job" not in r.stderr  # no progress line for a short seeding
    figures = status(redis_server_url, key_prefix, "streamed")
    assert figures["queued"] == queued and figures["sites"] == 9
    again = seed("streamed", "--file", "-", *common(redis_server_url, key_prefix), stdin=stdin)
    assert again.stderr.endswith("job streamed: 0 queued, 2 already seen, 1 invalid\n")


def test_invalid_entries_are_all_counted_and_the_first_listed(
    redis_server_url: str, key_prefix: str
) -> None:
    bad = [f"nope{i}" for i in range(INVALID_KEPT + 30)]
    text = "\n".join(["https://a.example/", *bad, "https://b.example/"]) + "\n"
    r = seed("lists", "--file", "-", *common(redis_server_url, key_prefix), stdin=text)
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert sum(" skipped: " in line for line in lines) == INVALID_KEPT
    assert f"seed {INVALID_KEPT + 1} skipped: 'nope{INVALID_KEPT - 1}'" in r.stderr
    assert "30 more invalid entries not listed" in lines
    assert lines[-1] == f"job lists: 2 queued, 0 already seen, {INVALID_KEPT + 30} invalid"


def test_stdin_that_is_not_text_part_way_says_what_was_queued(
    redis_server_url: str, key_prefix: str
) -> None:
    # a few CHUNKs of seeds, then a byte that is not UTF-8: by then batches
    # were committed (a pipe cannot be read twice to check it first)
    good = "".join(f"https://a{i % 3}.example/{i}\n" for i in range(4 * CHUNK // 26))
    data = good.encode() + b"https://z.example/\n\xff\xfe binary\n"
    r = seed("halfway", "--file", "-", *common(redis_server_url, key_prefix), stdin=data)
    assert r.returncode == 1
    lines = [x for x in r.stderr.splitlines() if not x.startswith("seeding job")]  # progress
    assert len(lines) == 1, r.stderr
    offset = len(good) + len("https://z.example/\n")
    match = re.fullmatch(
        f"crawlfleet seed: error: stdin: not a seed file \\(not UTF-8 text: byte 0xff at "
        f"offset {offset}\\); the ([0-9,]+) seeds before it are queued .*",
        lines[0],
    )
    assert match is not None, lines[0]
    committed = int(match.group(1).replace(",", ""))
    assert 0 < committed <= len(good.splitlines()) and committed % BATCH == 0
    assert status(redis_server_url, key_prefix, "halfway")["queued"] == committed


def test_a_file_that_is_not_text_is_refused_before_any_seed_is_queued(
    redis_server_url: str, key_prefix: str, tmp_path: Path
) -> None:
    path = tmp_path / "seeds.txt"
    good = "".join(f"https://a.example/{i}\n" for i in range(BATCH * 3))
    path.write_bytes(good.encode() + b"\x00\x01 binary\n")
    r = seed("refused", "--file", str(path), *common(redis_server_url, key_prefix))
    assert r.returncode == 1
    assert r.stderr.strip() == (
        f"crawlfleet seed: error: {path}: not a seed file (binary: a NUL byte)"
    )
    listed = cli("job", "list", *common(redis_server_url, key_prefix))
    assert "refused" not in listed.stdout  # nothing queued: no job
