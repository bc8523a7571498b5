"""Nodes storing into a real SQL database are killed at a random moment (SIGKILL, and a
double Ctrl-C that forces Scrapy's unclean shutdown): every page is fetched, and every
page has exactly one row. The benchmark runs ten such trials
(``crawlfleet bench``, part ``faults``); these run one of each kind.

PostgreSQL when it answers, else SQLite.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crawlfleet.benchmark.faults import FAULTS, run_fault_trial
from tests.pipelines.dbs import sql_test_url

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
