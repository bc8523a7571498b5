"""Continuous crawls end to end: real nodes (``crawlfleet crawl``) revisiting a small
loopback site every second, on the tests' Redis.

The site: a listing linking every page; /etag (an ETag, 304 when asked with it), /lm
(a Last-Modified, 304 when asked with it), /stamp (its timestamp moves at every visit,
its title once, at its third), /vanish (404 after its first visit), /plain (the same,
no validators). What the tests look at: the site's own log (visits, request headers),
the items the nodes wrote, the job's counters and change stream.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.node.launcher import start_node
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.state.db import StateDB
from crawlfleet.state.errors import list_errors
from tests.support.loopback import LoopbackSite
from tests.support.nodes import SPIDER
from tests.support.paths import ROOT
from tests.support.revisits import revisit_settings

#: The pages a node keeps revisiting once /vanish is gone: the listing and five.
TRACKED = ["/", "/etag", "/lm", "/stamp", "/plain"]
LAST_MODIFIED = "Mon, 02 Feb 2026 10:00:00 GMT"


class ChangingSite:
    """The loopback site of the module docstring; ``visits(path)`` counts its GETs."""

    def __init__(self) -> None:
        self.site = LoopbackSite(self.page)

    def visits(self, path: str) -> int:
        return self.site.hits.get(path, 0)

    def page(self, path: str, headers: dict[str, str]) -> tuple[Any, ...]:
        n = self.site.hits[path]  # this GET counted
        if path == "/":
            links = "".join(f'<a href="{p}">{p}</a>' for p in (*TRACKED[1:], "/vanish"))
            return 200, f"<html><body>{links}</body></html>".encode()
        if path == "/etag":
            if headers.get("If-None-Match") == '"e1"':
                return 304, b"", {"ETag": '"e1"'}
            return 200, product("Etag", "1"), {"ETag": '"e1"'}
        if path == "/lm":
            if headers.get("If-Modified-Since") == LAST_MODIFIED:
                return 304, b""
            return 200, product("Lm", "2"), {"Last-Modified": LAST_MODIFIED}
        if path == "/stamp":
            return 200, product("Old" if n < 3 else "New", "3", stamp=f"2026-01-01T00:00:{n:02}")
        if path == "/vanish":
            return (200, product("Here", "4")) if n == 1 else (404, b"<html>gone</html>")
        if path == "/plain":
            return 200, product("Plain", "5")
        return 404, b""

    def __enter__(self) -> ChangingSite:
        self.site.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.site.__exit__(*exc)


def product(title: str, price: str, stamp: str = "2026-01-01") -> bytes:
    return (
        f'<html><div class="product"><h1 class="title">{title}</h1>'
        f'<span class="price">{price}</span><span class="sku">{title}</span>'
        f'<time datetime="{stamp}">{stamp}</time></div></html>'
    ).encode()


@pytest.fixture
def site() -> Iterator[ChangingSite]:
    with ChangingSite() as changing:
        yield changing


def settings(node_env: dict[str, str]) -> dict[str, Any]:
    return {
        **revisit_settings(node_env, 1),
        "CRAWLFLEET_REVISIT_GONE_AFTER": 2,
        "CRAWLFLEET_REVISIT_IGNORE_FIELDS": "date",
    }


def node(
    site: ChangingSite,
    job: str,
    redis_url: str,
    node_env: dict[str, str],
    log: Path,
    output: Path | None = None,
) -> subprocess.Popen[bytes]:
    return start_node(
        SPIDER,
        job=job,
        redis_url=redis_url,
        log=log,
        spider_args={"start_urls": site.site.url},
        settings=settings(node_env),
        output=output,
        cwd=ROOT,
    )


def wait_for(check: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path, seconds: float):
    deadline = time.monotonic() + seconds
    while not check():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)


def stop(proc: subprocess.Popen[bytes], how: signal.Signals = signal.SIGINT) -> None:
    if proc.poll() is None:
        proc.send_signal(how)
    try:
        proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def job_state(redis_url: str, prefix: str, job: str) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """The job's counters and the events of its change stream."""

    async def read() -> tuple[dict[str, int], list[dict[str, Any]]]:
        client = make_client(redis_url)
        try:
            frontier = JobFrontier(client, JobKeys.of(prefix, job))
            counters = await frontier.counters()
            events = [json.loads(e) for _id, e in await frontier.changes(1000)]
            return counters, events
        finally:
            await client.aclose()

    return asyncio.run(read())


@pytest.mark.slow
def test_a_continuous_crawl_revisits_each_page_and_keeps_only_new_versions(
    site: ChangingSite,
    redis_server_url: str,
    node_env: dict[str, str],
    key_prefix: str,
    tmp_path: Path,
) -> None:
    log, output = tmp_path / "node.log", tmp_path / "items.jsonl"
    proc = node(site, "continuous", redis_server_url, node_env, log, output)
    try:
        # every page visited 4 times (/stamp's title changed at its third), /vanish gone
        # for 2 visits after its first
        wait_for(
            lambda: all(site.visits(p) >= 4 for p in TRACKED) and site.visits("/vanish") >= 3,
            proc,
            log,
            40,
        )
        time.sleep(0.5)  # the untrack of /vanish's last visit reaches Redis
    finally:
        stop(proc)
    assert site.visits("/vanish") == 3  # untracked: never fetched again

    # conditional requests where the site sends validators; a 304 gives no item
    asked = [h for p, h in site.site.headers if p == "/etag"]
    assert "If-None-Match" not in asked[0]
    assert all(h.get("If-None-Match") == '"e1"' for h in asked[1:])
    asked = [h for p, h in site.site.headers if p == "/lm"]
    assert all(h.get("If-Modified-Since") == LAST_MODIFIED for h in asked[1:])
    assert all("If-None-Match" not in h for p, h in site.site.headers if p == "/plain")

    items: dict[str, list[dict[str, Any]]] = {}
    for line in output.read_text().splitlines():
        item = json.loads(line)
        items.setdefault(item["url"].rsplit("/", 1)[1], []).append(item)
    # one version of each page that did not change (304s, or the same fields)
    for path in ("etag", "lm", "plain"):
        assert [i["version"] for i in items[path]] == [1], items[path]
    # a moving timestamp (an ignored field) is no new version; the new title is one
    stamp = items["stamp"]
    assert [(i["title"], i["version"]) for i in stamp] == [("Old", 1), ("New", 2)]
    assert stamp[0]["first_seen"] == stamp[1]["first_seen"] <= stamp[1]["changed_at"]
    assert [i["version"] for i in items["vanish"]] == [1]

    counters, events = job_state(redis_server_url, key_prefix, "continuous")
    # one request (rid) per tracked URL: nothing lost, nothing doubled
    assert counters.get("tracked") == len(TRACKED), counters
    assert counters.get("queued", 0) + counters.get("leased", 0) == len(TRACKED), counters
    kinds: dict[str, list[str]] = {}
    for event in events:
        kinds.setdefault(event["url"].rsplit("/", 1)[1], []).append(event["kind"])
    assert kinds["stamp"] == ["new", "changed"] and kinds["etag"] == ["new"]
    assert kinds["vanish"] == ["new", "gone", "untracked"]
    assert kinds[""] == ["new"]  # a listing whose links stay the same does not change

    # a 304 is no failure; a page gone is one (the error registry keeps its last)
    db = StateDB.open(f"sqlite:///{tmp_path / 'data' / 'state.sqlite3'}")
    try:
        errors = list_errors(db, "continuous")
    finally:
        db.close()
    assert [(e["url"].rsplit("/", 1)[1], e["http_status"]) for e in errors] == [("vanish", 404)]

    text = log.read_text()
    assert "'revisit/not_modified'" in text and "'revisit/unchanged'" in text
    assert "Traceback" not in text and "ERROR" not in text, text[-3000:]


@pytest.mark.slow
def test_kill_9_of_a_node_mid_crawl_loses_no_tracked_page(
    site: ChangingSite,
    redis_server_url: str,
    node_env: dict[str, str],
    key_prefix: str,
    tmp_path: Path,
) -> None:
    first_log, second_log = tmp_path / "node1.log", tmp_path / "node2.log"
    first = node(site, "killed", redis_server_url, node_env, first_log)
    try:
        wait_for(lambda: all(site.visits(p) >= 2 for p in TRACKED), first, first_log, 40)
        first.send_signal(signal.SIGKILL)  # some of its pages in flight, others waiting
        first.wait(10)
    finally:
        stop(first, signal.SIGKILL)
    before = {p: site.visits(p) for p in TRACKED}
    second = node(site, "killed", redis_server_url, node_env, second_log)
    try:
        # every tracked page comes back to the second node, and keeps coming back;
        # /vanish is untracked once it answered 404 twice in a row (a visit of the
        # killed node's may be lost: then its lease comes back, and it is fetched again)
        wait_for(
            lambda: (
                all(site.visits(p) >= before[p] + 2 for p in TRACKED)
                and job_state(redis_server_url, key_prefix, "killed")[0].get("tracked")
                == len(TRACKED)
            ),
            second,
            second_log,
            40,
        )
    finally:
        stop(second)
    counters, _events = job_state(redis_server_url, key_prefix, "killed")
    assert counters.get("tracked") == len(TRACKED), counters
    assert counters.get("queued", 0) + counters.get("leased", 0) == len(TRACKED), counters


@pytest.mark.slow
def test_a_lost_frontier_continues_each_pages_versions_in_the_sql_store(
    site: ChangingSite,
    redis_server_url: str,
    node_env: dict[str, str],
    key_prefix: str,
    sync_redis: Any,
    tmp_path: Path,
) -> None:
    import sqlalchemy as sa

    from crawlfleet.pipelines.sql import SqlSink

    def json_of(document: Any) -> dict[str, Any]:
        return json.loads(document) if isinstance(document, str) else dict(document)

    url = f"sqlite:///{tmp_path / 'items.sqlite3'}"
    env = {**node_env, "CRAWLFLEET_STORES": "sql", "CRAWLFLEET_SQL_URL": url}

    def held() -> dict[str, dict[str, Any]]:
        sink = SqlSink(url)
        try:
            with sink.engine.connect() as conn:
                rows = conn.execute(sa.select(sink.table.c.url, sink.table.c.document))
                return {str(u).rsplit("/", 1)[1]: json_of(d) for u, d in rows}
        finally:
            sink.teardown()

    log = tmp_path / "first.log"
    proc = node(site, "lost", redis_server_url, env, log)
    try:  # /stamp's new title at its third visit: its version 2
        wait_for(lambda: site.visits("/stamp") >= 4, proc, log, 40)
        time.sleep(0.5)
    finally:
        stop(proc)
    before = held()
    assert before["stamp"]["version"] == 2 and before["etag"]["version"] == 1
    # Redis restarted empty: every key of the job is gone
    for key in sync_redis.scan_iter(f"{key_prefix}:*"):
        sync_redis.delete(key)
    visits = site.visits("/stamp")
    log = tmp_path / "again.log"
    proc = node(site, "lost", redis_server_url, env, log)
    try:  # the job rebuilt from its seed: every page fetched and judged afresh
        wait_for(lambda: site.visits("/stamp") >= visits + 2, proc, log, 40)
        time.sleep(0.5)
    finally:
        stop(proc)
    after = held()
    # the same fields as stored: the same version, first seen when it first was
    for path in ("stamp", "etag", "lm", "plain"):
        assert after[path]["version"] == before[path]["version"], (path, after[path])
        assert after[path]["first_seen"] == before[path]["first_seen"], path
    assert "Traceback" not in log.read_text()
