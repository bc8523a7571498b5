"""Pages that disappear, end to end: a real node revisiting a loopback site every second
(``CRAWLFLEET_REVISIT=fixed``), its items in the SQL store on SQLite.

The site: a listing linking /going (a product, then 404 for ever) and /back (a product,
404 at its second visit, then the same product again). What is looked at: the rows the
node left in the store, the job's change stream, and the row of /back as it was when the
site served its return (read by the site itself, so that "marked before the next visit"
needs no timing guess).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from crawlfleet.node.launcher import start_node
from crawlfleet.pipelines.sql import items_table, row_document
from tests.node.test_continuous import job_state, product, settings, stop, wait_for
from tests.support.loopback import LoopbackSite
from tests.support.nodes import SPIDER
from tests.support.paths import ROOT


class VanishingSite:
    """The site of the module docstring; ``back_row`` is /back's stored document when
    the site served /back's return (None: no row then)."""

    def __init__(self, store: str) -> None:
        self.engine = sa.create_engine(store, poolclass=sa.NullPool)
        self.back_row: dict[str, Any] | None = None
        self.site = LoopbackSite(self.page)

    def visits(self, path: str) -> int:
        return self.site.hits.get(path, 0)

    def page(self, path: str, headers: dict[str, str]) -> tuple[Any, ...]:
        n = self.site.hits[path]  # this GET counted
        if path == "/":
            return 200, b'<html><a href="/going">a</a> <a href="/back">b</a></html>'
        if path == "/going":
            return (200, product("Going", "7")) if n == 1 else (404, b"<html>gone</html>")
        if path == "/back":
            if n == 2:
                return 410, b"<html>gone for now</html>"
            if n == 3:
                self.back_row = self.row("/back")
            return 200, product("Back", "8")
        return 404, b""

    def row(self, path: str) -> dict[str, Any] | None:
        """The stored document of the item of *path* (None: no row, or no table yet)."""
        table = items_table("crawlfleet_items")
        try:
            with self.engine.connect() as conn:
                query = sa.select(table).where(table.c.url == self.site.url.rstrip("/") + path)
                found = conn.execute(query).mappings().first()
        except sa.exc.OperationalError:
            return None
        return None if found is None else dict(row_document(found))

    def __enter__(self) -> VanishingSite:
        self.site.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.site.__exit__(*exc)
        self.engine.dispose()


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'items.sqlite3'}"


@pytest.fixture
def site(store: str) -> Iterator[VanishingSite]:
    with VanishingSite(store) as vanishing:
        yield vanishing


@pytest.mark.slow
def test_a_gone_page_keeps_its_item_marked_and_a_page_back_is_a_new_version(
    site: VanishingSite,
    store: str,
    redis_server_url: str,
    node_env: dict[str, str],
    key_prefix: str,
    tmp_path: Path,
) -> None:
    log = tmp_path / "node.log"
    proc = start_node(
        SPIDER,
        job="gone",
        redis_url=redis_server_url,
        log=log,
        spider_args={"start_urls": site.site.url},
        settings={**settings(node_env), "CRAWLFLEET_STORES": "sql", "CRAWLFLEET_SQL_URL": store},
        cwd=ROOT,
    )
    started = time.time()
    try:
        # /going: fetched, then gone twice (untracked); /back: fetched, gone, back, and
        # once more (its return acknowledged: its new version is stored)
        wait_for(lambda: site.visits("/going") >= 3 and site.visits("/back") >= 4, proc, log, 40)
        time.sleep(0.3)
    finally:
        stop(proc)
    assert site.visits("/going") == 3  # untracked after CRAWLFLEET_REVISIT_GONE_AFTER (2)

    going = site.row("/going")
    assert going is not None
    gone_at = going.pop("gone_at")
    # the rest as the page's last version left it
    assert (going["title"], going["price"], going["version"]) == ("Going", "7", 1)
    assert started - 1 <= datetime.fromisoformat(gone_at).timestamp() <= time.time()
    assert datetime.fromisoformat(gone_at) >= datetime.fromisoformat(going["changed_at"])

    # marked before its next visit: the row as the site saw it when /back returned
    assert site.back_row is not None and "gone_at" in site.back_row, site.back_row
    assert site.back_row["version"] == 1
    back = site.row("/back")
    assert back is not None and "gone_at" not in back, back
    assert (back["title"], back["version"]) == ("Back", 2)  # back: a new version

    _counters, events = job_state(redis_server_url, key_prefix, "gone")
    kinds: dict[str, list[str]] = {}
    for event in events:
        kinds.setdefault(event["url"].rsplit("/", 1)[1], []).append(event["kind"])
    assert kinds["going"] == ["new", "gone", "untracked"]
    assert kinds["back"] == ["new", "gone", "changed"]
    stats = log.read_text()
    assert "'revisit/gone_marked': 2" in stats, stats[-3000:]
    assert "Traceback" not in stats and "ERROR" not in stats, stats[-3000:]
