"""Campaigns in the state DB (SQLite, PostgreSQL, MariaDB): the cursor hands each unit
out once, also to nodes claiming at the same time; the fleet-wide window; leases that
lapse; done/failed units; the re-crawl round and the end; pause, resume, stop, extend."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from crawlfleet.campaigns.space import ParamSpace
from crawlfleet.exceptions import ConfigError
from crawlfleet.state.campaigns import (
    campaign_status,
    claim_units,
    create_campaign,
    extend_campaign,
    finish_unit,
    list_campaigns,
    mark_fed,
    set_campaign_state,
    settle_fed,
    wrap_up,
)
from crawlfleet.state.db import StateDB

SPACE = ParamSpace.from_dict({"from": "2026-01-01", "to": "2026-01-03", "categories": ["a", "b"]})
URL = "http://127.0.0.1:1/archive/{date}/{category}"


def make(db: StateDB, **kw: Any) -> dict[str, Any]:
    return create_campaign(db, "c1", job="job1", space=SPACE, template=URL, **kw)


def test_units_are_handed_out_once_within_the_window(state_db: StateDB) -> None:
    made = make(state_db, units_ahead=4)
    assert (made["state"], made["total"], made["cursor"]) == ("running", 6, 0)
    info, got = claim_units(state_db, "c1", "n1", most=3, lease_seconds=60)
    assert [u.label for _, u, _ in got] == ["2026-01-01/a", "2026-01-01/b", "2026-01-02/a"]
    assert info["template"] == URL and not any(again for *_, again in got)
    _, more = claim_units(state_db, "c1", "n2", most=3, lease_seconds=60)
    assert len(more) == 1  # the window: 4 units in flight at most
    assert mark_fed(state_db, "n1", [uid for uid, *_ in got]) == 3
    assert mark_fed(state_db, "n1", [more[0][0]]) == 0  # not n1's
    assert finish_unit(state_db, got[0][0], ok=True)
    assert not finish_unit(state_db, got[0][0], ok=False)  # done stays done
    _, after = claim_units(state_db, "c1", "n2", most=3, lease_seconds=60)
    assert [u.label for _, u, _ in after] == ["2026-01-03/a"]
    status = campaign_status(state_db, "c1")
    assert status["cursor"] == 5 and status["units"]["done"] == 1
    assert status["units"]["fed"] == 2 and status["units"]["leased"] == 2


def test_a_lapsed_lease_goes_to_another_node(state_db: StateDB) -> None:
    make(state_db)
    _, got = claim_units(state_db, "c1", "dies", most=1, lease_seconds=0.2)
    time.sleep(0.4)
    _, again = claim_units(state_db, "c1", "lives", most=1, lease_seconds=60)
    assert [uid for uid, *_ in again] == [got[0][0]]  # the same unit, not the next one
    assert again[0][2] is False  # fed again by the seen-filter's rules: never twice
    assert mark_fed(state_db, "dies", [got[0][0]]) == 0


def test_nodes_claiming_at_once_never_share_a_unit(state_db: StateDB) -> None:
    space = ParamSpace.from_dict({"categories": [f"c{i:03d}" for i in range(120)]})
    create_campaign(state_db, "c1", job="job1", space=space, template="", units_ahead=1000)
    seen: list[int] = []
    errors: list[BaseException] = []

    def node(name: str) -> None:
        try:
            for _ in range(20):
                _, got = claim_units(state_db, "c1", name, most=2, lease_seconds=60)
                seen.extend(u.index for _, u, _ in got)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=node, args=(f"n{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sorted(seen) == list(range(120))


def test_recrawl_round_then_the_end(state_db: StateDB) -> None:
    make(state_db, max_attempts=2, units_ahead=10)
    _, got = claim_units(state_db, "c1", "n1", most=10, lease_seconds=60)
    mark_fed(state_db, "n1", [uid for uid, *_ in got])
    finish_unit(state_db, got[1][0], ok=False, error="http: HTTP 503")
    _info, none = claim_units(state_db, "c1", "n1", most=10, lease_seconds=60)
    assert not none
    status = campaign_status(state_db, "c1")
    assert status["units"]["failed"] == 1 and status["failed"][0]["error"] == "http: HTTP 503"
    # every unit handed out, the frontier empty: the failed unit is fed again, once
    assert wrap_up(state_db, "c1") == "recrawl"
    _, again = claim_units(state_db, "c1", "n2", most=10, lease_seconds=60)
    assert [(uid, retry) for uid, _, retry in again] == [(got[1][0], True)]
    finish_unit(state_db, got[1][0], ok=False, error="http: HTTP 503")
    assert wrap_up(state_db, "c1") == "finished"  # attempts spent: it stays failed
    status = campaign_status(state_db, "c1")
    # units still "fed" at the end were crawled by the frontier: done
    assert status["state"] == "finished" and status["units"]["done"] == 5
    assert status["progress"] == 1.0 and status["finished_at"]


def test_pause_resume_stop_extend(state_db: StateDB) -> None:
    make(state_db)
    assert set_campaign_state(state_db, "c1", "pause")["state"] == "paused"
    info, got = claim_units(state_db, "c1", "n1", most=5, lease_seconds=60)
    assert info["state"] == "paused" and got == []
    assert set_campaign_state(state_db, "c1", "pause")["state"] == "paused"  # idempotent
    assert set_campaign_state(state_db, "c1", "resume")["state"] == "running"
    extended = extend_campaign(state_db, "c1", "2026-01-05")
    assert extended["total"] == 10
    with pytest.raises(ConfigError, match="before the current end"):
        extend_campaign(state_db, "c1", "2026-01-04")
    _, got = claim_units(state_db, "c1", "n1", most=2, lease_seconds=60)
    assert len(got) == 2
    assert set_campaign_state(state_db, "c1", "stop")["state"] == "stopping"
    assert claim_units(state_db, "c1", "n1", most=2, lease_seconds=60)[1] == []
    assert wrap_up(state_db, "c1") == "stopped"
    with pytest.raises(ConfigError, match="is stopped: cannot resume"):
        set_campaign_state(state_db, "c1", "resume")
    assert [c["name"] for c in list_campaigns(state_db)] == ["c1"]


def test_bad_campaigns_say_what_is_wrong(state_db: StateDB) -> None:
    make(state_db)
    for kw, message in (
        ({"name": "c1"}, "exists already"),
        ({"name": "bad name"}, "campaign name"),
        ({"name": "c2", "template": "http://x/{keyword}"}, "which the campaign has not"),
        ({"name": "c2", "max_attempts": 0}, "max attempts"),
        ({"name": "c2", "template": "http://x/{category}"}, "must use \\{date\\}"),
    ):
        args: dict[str, Any] = {"job": "job1", "space": SPACE, "template": URL, **kw}
        name = args.pop("name")
        with pytest.raises(ConfigError, match=message):
            create_campaign(state_db, name, **args)
    with pytest.raises(ConfigError, match="unknown campaign 'nope'"):
        campaign_status(state_db, "nope")


def test_units_whose_report_never_comes_and_recrawled_units(state_db: StateDB) -> None:
    make(state_db, max_attempts=3, units_ahead=2)
    _, got = claim_units(state_db, "c1", "n1", most=5, lease_seconds=60)
    mark_fed(state_db, "n1", [uid for uid, *_ in got])
    # the window is full of units whose first page never reported (a node killed...)
    assert claim_units(state_db, "c1", "n1", most=5, lease_seconds=60)[1] == []
    time.sleep(0.3)
    assert settle_fed(state_db, "c1", older_than=0.2) == 2  # the frontier finished them
    _, more = claim_units(state_db, "c1", "n1", most=5, lease_seconds=0.2)
    assert len(more) == 2
    for uid, *_ in more:
        finish_unit(state_db, uid, ok=False, error="http: HTTP 503")
    _, rest = claim_units(state_db, "c1", "n1", most=5, lease_seconds=60)
    mark_fed(state_db, "n1", [uid for uid, *_ in rest])
    settle_fed(state_db, "c1", older_than=0)
    assert wrap_up(state_db, "c1") == "recrawl"
    # a re-crawl unit whose re-feed lapsed is still fed as a re-crawl (past the filter)
    _, again = claim_units(state_db, "c1", "dies", most=1, lease_seconds=0.2)
    assert again[0][2] is True
    time.sleep(0.4)
    _, taken = claim_units(state_db, "c1", "n2", most=1, lease_seconds=60)
    assert taken[0][0] == again[0][0] and taken[0][2] is True
    # the other failed unit's first page succeeded as a re-crawled link: done
    other = next(uid for uid, *_ in more if uid != again[0][0])
    assert finish_unit(state_db, other, ok=True)
    assert campaign_status(state_db, "c1")["units"]["pending"] == 0
