"""The error registry in the state DB, on SQLite, PostgreSQL and MariaDB: one row per
job and request, counted again on each failure and reopened; re-crawls take open rows
once; resolutions; counts; writes from several threads at once."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from crawlfleet.exceptions import ConfigError
from crawlfleet.state.db import StateDB
from crawlfleet.state.errors import (
    error_stats,
    list_errors,
    record_failures,
    recrawl_progress,
    reopen_errors,
    resolve_errors,
    take_for_recrawl,
)
from crawlfleet.state.models import utcnow
from tests.support.failures import failure


def test_a_failure_is_one_row_counted_again_and_reopened(state_db: StateDB) -> None:
    assert record_failures(state_db, [failure(1), failure(2, "exception", detail="Timeout")]) == 2
    later = utcnow() + timedelta(seconds=5)
    record_failures(state_db, [failure(1, "parse", detail="ValueError: x", at=later, stack="tb")])
    rows = {e["url"][-1]: e for e in list_errors(state_db, "j", stack=True)}
    assert rows["1"]["failures"] == 2 and rows["1"]["reason"] == "parse"
    assert rows["1"]["stack"] == "tb" and rows["1"]["first_seen"] < rows["1"]["last_seen"]
    assert list(rows) == ["1", "2"]  # the latest failure first
    assert list_errors(state_db, "other") == []

    taken = take_for_recrawl(state_db, "j", reason="parse")
    assert [(t[0], t[1], t[3]) for t in taken] == [
        (rows["1"]["id"], "http://127.0.0.1:9/p/1", b"\x01payload")
    ]
    assert take_for_recrawl(state_db, "j", reason="parse") == []  # queued once only
    assert reopen_errors(state_db, "j", [taken[0][0]]) == 1  # could not be queued: open
    assert take_for_recrawl(state_db, "j", reason="parse")[0][0] == taken[0][0]
    assert error_stats(state_db, "j")["by_state"] == {"open": 1, "queued": 1, "resolved": 0}
    assert resolve_errors(state_db, "j", [rows["1"]["id"]]) == 1
    assert resolve_errors(state_db, "other", [rows["2"]["id"]]) == 0  # another job's id
    (resolved,) = list_errors(state_db, "j", state="resolved")
    assert resolved["resolved_at"] and resolved["recrawls"] == 1
    record_failures(state_db, [failure(1)])  # fails again: open again, resolution gone
    again = next(e for e in list_errors(state_db, "j") if e["url"].endswith("/1"))
    assert again["state"] == "open" and again["resolved_at"] is None and again["failures"] == 3

    stats = error_stats(state_db, "j")
    assert stats["total"] == 2 and stats["open_by_reason"] == {"exception": 1, "http": 1}
    assert stats["open_by_site"] == {"127.0.0.1": 2}
    with pytest.raises(ConfigError, match="reason must be one of"):
        list_errors(state_db, "j", reason="nope")


def test_a_recrawl_round_is_counted_by_the_ids_it_queued(state_db: StateDB) -> None:
    record_failures(
        state_db,
        [failure(n, site=f"s{n % 2}.org") for n in range(5)] + [failure(9, job="other")],
    )
    taken = [t[0] for t in take_for_recrawl(state_db, "j")]
    assert len(taken) == 5
    assert recrawl_progress(state_db, "j", taken) == {
        "taken": 5,
        "queued": 5,
        "resolved": 0,
        "open": 0,
        "round": 1,
        "waiting_sites": {"s0.org": 3, "s1.org": 2},
    }
    by_url = {e["url"][-1]: e["id"] for e in list_errors(state_db, "j", state=None)}
    resolve_errors(state_db, "j", [by_url["0"], by_url["1"]])
    record_failures(state_db, [failure(2, site="s0.org")])  # failed again: open
    other = list_errors(state_db, "other")[0]["id"]  # another job's: not counted
    progress = recrawl_progress(state_db, "j", [*taken, other])
    assert (progress["queued"], progress["resolved"], progress["open"]) == (2, 2, 1)
    assert progress["waiting_sites"] == {"s0.org": 1, "s1.org": 1}
    assert recrawl_progress(state_db, "j", [])["taken"] == 0


def test_nodes_writing_at_once_keep_one_row_a_request(state_db: StateDB) -> None:
    def node(k: int) -> None:
        record_failures(state_db, [failure(n, node=f"node-{k}") for n in range(20)])

    threads = [threading.Thread(target=node, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    rows = list_errors(state_db, "j", limit=1000)
    assert len(rows) == 20 and sorted(e["failures"] for e in rows) == [4] * 20


def test_the_api_and_the_registry_agree_on_reasons() -> None:
    from typing import get_args

    from crawlfleet.manager.routes.models import ErrorReason
    from crawlfleet.state.errors import REASONS

    assert get_args(ErrorReason) == REASONS
