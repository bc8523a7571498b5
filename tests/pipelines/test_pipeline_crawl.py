"""The item pipeline in crawls of the bundled site by real node processes.

Two ``crawlfleet crawl`` nodes run the site's spider spec (``testsite/spec.yaml``) with
every item stage and the SQL store, on the site with its problems (legacy encodings,
redirects, error pages). The table must end with exactly one row per page, the
legacy-encoded pages' text as the model has it, and the articles' extracted text close
to the truth; with PostgreSQL behind a proxy that goes down mid-crawl, nothing may be
lost or doubled.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from crawlfleet.node.launcher import wait_all
from crawlfleet.pipelines.quality import token_f1
from crawlfleet.pipelines.sql import items_table
from crawlfleet.testsite import model as site_model
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import TestSite
from crawlfleet.testsite.tcpproxy import TcpProxy
from tests.support.databases import require_server, unique_table
from tests.support.nodes import node_logs, site_node
from tests.support.waiting import poll

pytestmark = pytest.mark.slow

SPEC = Path(site_model.__file__).resolve().parent / "spec.yaml"
MODEL = SiteModel(pages=90, hosts=3)  # problems on


def node_settings(
    node_env: dict[str, str], sql_url: str, table: str, **extra: Any
) -> dict[str, Any]:
    return {
        **node_env,
        "CONCURRENT_REQUESTS": 4,
        "DOWNLOAD_TIMEOUT": 2,
        "RETRY_TIMES": 1,
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False,
        "CRAWLFLEET_LEASE_SECONDS": 5,
        "CRAWLFLEET_HEARTBEAT_SECONDS": 0.5,
        "CRAWLFLEET_RECLAIM_SECONDS": 0.5,
        "CRAWLFLEET_FINISH_GRACE_SECONDS": 1,
        "CRAWLFLEET_STORES": "sql",
        "CRAWLFLEET_SQL_URL": sql_url,
        "CRAWLFLEET_SQL_TABLE": table,
        "CRAWLFLEET_STORE_BATCH_SECONDS": 0.1,
        **extra,
    }


def start_nodes(
    site: TestSite,
    redis_url: str,
    tmp_path: Path,
    settings: dict[str, Any],
    count: int = 2,
    log: str = "node",
) -> list[subprocess.Popen[bytes]]:
    return [
        site_node(
            site,
            job="items",
            redis_url=redis_url,
            log=tmp_path / f"{log}{i}.log",
            settings=settings,
            spider=str(SPEC),
        )
        for i in range(count)
    ]


def finish(procs: Sequence[subprocess.Popen[bytes]], tmp_path: Path, timeout: float = 90) -> None:
    codes = wait_all(procs, timeout)
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    assert codes == [0, 0], f"exit codes {codes}\n{node_logs(tmp_path)[-4000:]}"
    assert node_logs(tmp_path).count("Spider closed (finished)") == 2


def stored_rows(url: str, table: str) -> list[dict[str, Any]]:
    """Every row of *table*: url, item_type, the document, and the document's stored
    bytes where the database gives them (SQLite keeps JSON as text)."""
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    t = items_table(table)
    try:
        with engine.connect() as conn:
            raw = sa.cast(t.c.document, sa.LargeBinary) if engine.dialect.name == "sqlite" else None
            columns = [t.c.key, t.c.url, t.c.item_type, t.c.document]
            rows = conn.execute(sa.select(*columns, *([raw] if raw is not None else [])))
            out = []
            for row in rows:
                document = row[3] if isinstance(row[3], dict) else json.loads(row[3])
                out.append(
                    {
                        "key": row[0],
                        "url": row[1],
                        "type": row[2],
                        "document": document,
                        "raw": row[4] if raw is not None else None,
                    }
                )
            return out
    finally:
        engine.dispose()


def count_rows(url: str, table: str) -> int:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())
    except sa.exc.DBAPIError:
        return 0  # not created yet
    finally:
        engine.dispose()


def assert_one_row_per_page(
    rows: list[dict[str, Any]], site: TestSite
) -> dict[int, dict[str, Any]]:
    """Exactly one row per content page; returns them by page id."""
    page_of = {site.url(n): n for n in range(MODEL.pages)}
    assert len(rows) == MODEL.pages, sorted(r["url"] for r in rows)
    assert {r["url"] for r in rows} == set(page_of)
    by_page = {page_of[r["url"]]: r for r in rows}
    for n, row in by_page.items():
        assert row["type"] == ("article" if MODEL.is_article(n) else "product"), n
    return by_page


@pytest.fixture
def site() -> Iterator[TestSite]:
    with TestSite(MODEL, timeout_seconds=5) as running:
        yield running


def test_two_nodes_store_every_page_once_with_true_text(
    site: TestSite, redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    sql_url = f"sqlite:///{tmp_path / 'items.sqlite3'}"
    settings = node_settings(node_env, sql_url, "crawlfleet_items")
    finish(start_nodes(site, redis_server_url, tmp_path, settings), tmp_path)
    stats = site.stats()
    assert stats["never_fetched"] == [] and stats["fetched_twice"] == []

    by_page = assert_one_row_per_page(stored_rows(sql_url, "crawlfleet_items"), site)
    assert len(MODEL.encoded_pages) == 6
    for n, case in MODEL.encoded_pages.items():
        row = by_page[n]
        label = f"page {n} ({case.codec}, header {case.header_charset}, meta {case.meta_charset})"
        assert row["document"]["title"] == case.title, label
        assert row["document"]["description"] == case.description, label
        text = row["raw"].decode("utf-8")  # stored as valid UTF-8, not escaped
        assert case.title in text and case.description in text, label
    articles = sorted(MODEL.article_ids)
    assert len(articles) == 9
    for n in articles:
        document = by_page[n]["document"]
        assert token_f1(document["text"], MODEL.article_text(n)) >= 0.9, n
        assert document["title"] == MODEL.article(n).headline, n


def postgresql_behind_a_proxy(
    node_env: dict[str, str],
) -> tuple[str, TcpProxy, str, dict[str, Any]]:
    """The test PostgreSQL (skip without one) behind a started TCP proxy that can be
    stopped, a table of this test's own, and node settings storing there through it:
    ``(direct URL, proxy, table, settings)``."""
    pg = require_server("postgresql")
    real = make_url(pg)
    proxy = TcpProxy(real.host or "127.0.0.1", real.port or 5432)
    proxy.start()
    via_proxy = real.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    table = unique_table()
    settings = node_settings(
        node_env,
        via_proxy,
        table,
        CONCURRENT_REQUESTS=2,
        CRAWLFLEET_STORE_RETRY_MIN_SECONDS=0.2,
        CRAWLFLEET_STORE_RETRY_MAX_SECONDS=1,
    )
    return pg, proxy, table, settings


def drop_table(url: str, table: str) -> None:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    items_table(table).drop(engine, checkfirst=True)
    engine.dispose()


def test_postgresql_down_mid_crawl_loses_nothing(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    pg, proxy, table, settings = postgresql_behind_a_proxy(node_env)
    # latency stretches the crawl over several seconds: the outage falls inside it
    with TestSite(MODEL, latency_seconds=0.15, timeout_seconds=5) as site:
        procs = start_nodes(site, redis_server_url, tmp_path, settings)
        try:
            assert poll(lambda: count_rows(pg, table) >= 5, timeout=40, step=0.05), node_logs(
                tmp_path
            )[-3000:]
            proxy.stop()
            stored_before = count_rows(pg, table)
            time.sleep(3)  # items keep coming: the store must notice and wait
            proxy.start()
            finish(procs, tmp_path)
            rows = stored_rows(pg, table)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            proxy.stop()
            drop_table(pg, table)
    assert stored_before < MODEL.pages, "the crawl was over before the store went down"
    assert_one_row_per_page(rows, site)
    text = node_logs(tmp_path)
    assert f"table {table} is unreachable" in text, text[-4000:]
    assert f"table {table} is back after" in text, text[-4000:]


def test_ctrl_c_while_postgresql_is_down_gives_the_pages_back(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    """A stop asked for while the store is down: the node does not wait for the store;
    the pages whose items were not stored go back to the frontier (not acknowledged),
    the node exits 1 saying so, and a later node stores them: nothing is lost."""
    pg, proxy, table, settings = postgresql_behind_a_proxy(node_env)
    with TestSite(MODEL, latency_seconds=0.1, timeout_seconds=5) as site:
        procs = start_nodes(site, redis_server_url, tmp_path, settings, 1, "stopped")
        try:
            assert poll(lambda: count_rows(pg, table) >= 5, timeout=40, step=0.05), node_logs(
                tmp_path
            )[-3000:]
            proxy.stop()
            time.sleep(1.5)  # items of pages fetched meanwhile wait for the store
            started = time.monotonic()
            procs[0].send_signal(signal.SIGINT)
            code = procs[0].wait(30)
            stop_seconds = time.monotonic() - started
            assert count_rows(pg, table) < MODEL.pages
            proxy.start()
            procs = start_nodes(site, redis_server_url, tmp_path, settings)
            finish(procs, tmp_path)
            rows = stored_rows(pg, table)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            proxy.stop()
            drop_table(pg, table)
    stopped = (tmp_path / "stopped0.log").read_text(errors="replace")
    assert code == 1, stopped[-3000:]
    assert stop_seconds < 10, "the stop must not wait for the store"
    assert "go back to the frontier" in stopped, stopped[-3000:]
    assert "'crawlfleet/frontier/unstored'" in stopped, stopped[-3000:]
    assert_one_row_per_page(rows, site)
