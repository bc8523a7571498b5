"""Nodes storing into a real SQL database are killed at a random moment (SIGKILL, and a
double Ctrl-C that forces Scrapy's unclean shutdown): every page is fetched, and every
page has exactly one row. The benchmark runs ten such trials
(``crawlfleet bench``, part ``faults``); these run one of each kind. A node killed while
PostgreSQL is down costs few pages fetched again (the outage trial, scaled down).

PostgreSQL when it answers, else SQLite.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crawlfleet.benchmark.faults import FAULTS, run_fault_trial
from crawlfleet.benchmark.outage import run_outage_trial
from tests.support.databases import require_server, sql_test_url

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("fault", FAULTS)
def test_a_node_hit_at_a_random_moment_loses_no_item(
    fault: str, redis_server_url: str, key_prefix: str, tmp_path: Path
) -> None:
    result = run_fault_trial(
        fault,
        sql_url=sql_test_url(tmp_path),
        redis_url=redis_server_url,
        workdir=tmp_path / "trial",
        key_prefix=key_prefix,
        pages=240,
    )
    logs = "\n".join(
        p.read_text(errors="replace")[-3000:] for p in (tmp_path / "trial").glob("*.log")
    )
    assert result.never_fetched == 0, (result, logs)
    assert result.items_lost == 0, (result, logs)
    assert result.duplicate_rows == 0, result
    assert result.rows == result.pages, result
    assert result.exit_codes[0] != 0, "a node that was killed or forced to stop exits non-zero"
    assert result.exit_codes[1:] == [0, 0, 0], (result, logs)


# in the timing pass: the victim must reach its bound within the 3 s before the kill,
# which a node beside three other test workers on two cores did not always do
@pytest.mark.timing
def test_a_store_outage_costs_no_recrawl(
    redis_server_url: str, key_prefix: str, tmp_path: Path
) -> None:
    """The outage trial of ``crawlfleet bench`` (30 s down, a node killed 15 s in) scaled
    down: PostgreSQL down 6 s, one of two nodes killed 3 s in and replaced, a bound of
    20 unstored items. Every page is stored once; the kill costs at most the bound plus
    the killed node's requests in flight in pages fetched again; the nodes said they
    were waiting, and the recovery line counted every waiting item. (Before the bound, the
    nodes crawled on through the outage and a kill cost every page since it began.)"""
    pg = require_server("postgresql")
    result = run_outage_trial(
        postgres_url=pg,
        redis_url=redis_server_url,
        workdir=tmp_path / "trial",
        key_prefix=key_prefix,
        pages=400,
        latency=0.05,
        concurrency=4,
        pending_max=20,
        outage_seconds=6,
        kill_after_seconds=3,
        timeout=120,
    )
    logs = "\n".join(
        p.read_text(errors="replace")[-3000:] for p in (tmp_path / "trial").glob("*.log")
    )
    assert result.exit_codes[1:] == [0, 0], (result, logs)
    assert result.never_fetched == 0 and result.items_lost == 0, (result, logs)
    assert result.duplicate_rows == 0 and result.rows == result.pages, result
    # the nodes stopped: the outage did not turn into crawling the rest of the site
    assert result.fetched_at_back - result.fetched_at_down <= 3 * result.refetch_bound, result
    assert result.fetched_at_back < result.pages, "the crawl was over before the store was back"
    # the kill cost what the killed node held (its bound, plus what was in flight)
    assert result.victim_state == "waiting for the item store", result
    assert result.fetched_again <= result.victim_held <= result.refetch_bound, result
    assert result.nodes_waited >= 2, result  # the killed one, and the other or its successor
    # the node that lived through the whole outage held its bound, and its recovery line
    # counted every waiting item (the killed node's successor, started late on a loaded
    # machine, may see the store back before it reaches the bound: 15 of 20 once)
    assert result.recovery_counts and max(result.recovery_counts) >= result.pending_max, result
