"""The node's half of continuous crawls: what becomes of a finished request of a
tracked page (kept for its next visit, untracked, or acknowledged), a state handed on to
a retry or a redirect and never shared with another page, and a node on the in-memory
frontier revisiting a page under the same request id."""

from __future__ import annotations

import json
from typing import Any

from scrapy import Request, Spider

from crawlfleet.frontier.records import Revisit, Untrack
from crawlfleet.frontier.serialization import RequestCodec
from crawlfleet.meta import REVISIT_META
from crawlfleet.node.revisits import RevisitKeeper
from crawlfleet.node.stats import NodeStats
from crawlfleet.revisit.config import revisit_policy
from crawlfleet.settings.config import settings_with_defaults
from tests.support.node_parts import Engine, node, run, take, until

NOW = 1_800_000_000.0
CODEC = RequestCodec(None)


class Stats:
    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def inc_value(self, key: str, count: int = 1) -> None:
        self.values[key] = self.values.get(key, 0) + count

    def get_value(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


def keeper(stats: Stats | None = None, **values: Any) -> RevisitKeeper:
    settings = settings_with_defaults(
        {
            "CRAWLFLEET_REVISIT": "adaptive",
            "CRAWLFLEET_REVISIT_INTERVAL_SECONDS": 100,
            "CRAWLFLEET_REVISIT_MIN_SECONDS": 10,
            "CRAWLFLEET_REVISIT_MAX_SECONDS": 1000,
            "CRAWLFLEET_REVISIT_GONE_AFTER": 2,
            "CRAWLFLEET_REVISIT_RULES": [{"pattern": "/once", "policy": "off"}],
            **values,
        }
    )
    return RevisitKeeper(revisit_policy(settings), CODEC.encode, NodeStats(stats), lambda: NOW)


def visited(url: str, **state: Any) -> Request:
    return Request(url, meta={REVISIT_META: {"url": url, **state}})


def kept_state(kept: Revisit) -> dict[str, Any]:
    state: dict[str, Any] = CODEC.decode(kept.payload).meta[REVISIT_META]
    return state


def test_a_fetched_page_is_kept_for_its_next_visit() -> None:
    stats = Stats()
    k = keeper(stats)
    request = visited("http://a.test/p", outcome="changed", version=1, changed=NOW, etag='"e"',
                      cond=1, hint=5.0)  # fmt: skip
    request.headers[b"If-None-Match"] = b'"old"'  # crawlfleet's: not kept
    request.meta["retry_times"] = 2  # of this try: not kept
    request.meta["depth"] = 3
    kept = k.finished(request, "r1")
    assert isinstance(kept, Revisit)
    assert (kept.rid, kept.delay_ms, kept.new) == ("r1", 100_000, True)
    assert json.loads(kept.event) == {
        "url": "http://a.test/p",
        "version": 1,
        "changed_at": "2027-01-15T08:00:00+00:00",
        "kind": "new",
    }
    again = CODEC.decode(kept.payload)
    assert b"If-None-Match" not in again.headers
    assert "retry_times" not in again.meta and again.meta["depth"] == 3
    state = again.meta[REVISIT_META]
    assert state == {
        "version": 1,
        "changed": NOW,
        "etag": '"e"',
        "visits": 1,
        "interval": 100.0,
        "due": NOW + 100,
        "kept": 1,
    }
    # the next visit, unchanged: later (adaptive), not new, no event
    request = Request("http://a.test/p", meta={REVISIT_META: {**state, "outcome": "unchanged",
                                                              "last": NOW + 130}})  # fmt: skip
    kept = k.finished(request, "r1")
    assert isinstance(kept, Revisit) and not kept.new and kept.event == b""
    assert kept.delay_ms == 150_000 and kept_state(kept)["visits"] == 2
    # a change: sooner, an event
    request = Request("http://a.test/p", meta={REVISIT_META: {**kept_state(kept),
                      "outcome": "changed", "version": 2}})  # fmt: skip
    kept = k.finished(request, "r1")
    assert isinstance(kept, Revisit) and kept.delay_ms == 75_000
    assert json.loads(kept.event)["kind"] == "changed"
    assert stats.values["revisit/changed"] == 2 and stats.values["revisit/unchanged"] == 1
    assert stats.values["revisit/late_seconds"] == 30  # due at NOW + 100, fetched at 130
    assert stats.values["revisit/kept"] == 3


def test_gone_pages_are_untracked_after_gone_after_visits_and_failures_are_kept() -> None:
    k = keeper()
    tracked = {"visits": 3, "kept": 1, "interval": 200.0, "version": 2}
    first = k.finished(visited("http://a.test/p", outcome="gone", gone=1, **tracked), "r")
    assert isinstance(first, Revisit) and first.delay_ms == 200_000  # the same interval
    assert json.loads(first.event)["kind"] == "gone"
    second = k.finished(visited("http://a.test/p", outcome="gone", gone=2, **tracked), "r")
    assert isinstance(second, Untrack) and json.loads(second.event)["kind"] == "untracked"
    failed = k.finished(visited("http://a.test/p", outcome="failed", **tracked), "r")
    assert isinstance(failed, Revisit) and failed.delay_ms == 200_000 and not failed.new
    raised = k.finished(visited("http://a.test/p", outcome="fetched", **tracked), "r")
    assert isinstance(raised, Revisit)  # a callback that raised: a failed visit
    # never fetched: not tracked (an ordinary ack); no longer tracked by its rule
    assert k.finished(visited("http://a.test/p", outcome="gone", gone=1), "r") is None
    assert k.finished(visited("http://a.test/p", outcome="failed"), "r") is None
    assert k.finished(visited("http://a.test/once", outcome="changed", version=1), "r") is None
    assert k.finished(visited("http://a.test/once", outcome="changed", kept=1), "r") == Untrack("r")
    assert k.finished(Request("http://a.test/robots.txt"), "r") is None
    # refused before it was sent (robots.txt disallows it now): untracked
    assert k.finished(Request("http://a.test/p", meta={REVISIT_META: {"kept": 1}}), "r") == (
        Untrack("r")
    )


def test_a_state_goes_on_with_a_retry_or_a_redirect_never_to_another_page() -> None:
    k = keeper()
    original = visited("http://a.test/p", outcome="failed", kept=1, visits=2, etag='"e"')
    retry = original.copy()  # Scrapy copies meta shallowly: the same state dict
    k.entering(retry)
    assert retry.meta[REVISIT_META] == {"visits": 2, "etag": '"e"'}  # counted anew
    assert k.finished(original, "r1") == Untrack("r1")  # its lease ends, untracked
    kept = k.finished(
        Request(retry.url, meta={REVISIT_META: {**retry.meta[REVISIT_META],
                                                "outcome": "unchanged"}}), "r2"
    )  # fmt: skip
    assert isinstance(kept, Revisit) and kept.new  # the new lease is counted instead

    original = visited("http://a.test/old", outcome="failed", visits=1)
    moved = original.replace(url="http://a.test/new")
    moved.meta["redirect_urls"] = ["http://a.test/old"]
    k.entering(moved)
    assert moved.meta[REVISIT_META] == {"visits": 1}
    assert k.finished(original, "r3") is None  # not counted: a plain ack

    parent = visited("http://a.test/list", outcome="failed", kept=1)
    child = Request("http://a.test/item", meta=dict(parent.meta))  # meta copied wholesale
    k.entering(child)
    assert REVISIT_META not in child.meta
    assert parent.meta[REVISIT_META]["outcome"] == "failed"  # still its own
    own = Request("http://a.test/x", meta={REVISIT_META: {"cf": "daily"}})  # a spider's
    k.entering(own)
    assert own.meta[REVISIT_META] == {"cf": "daily"}


def test_a_node_keeps_a_tracked_page_under_its_rid_and_revisits_it() -> None:
    async def body() -> None:
        store: dict[str, Any] = {}
        engine = Engine()
        scheduler = node(store, engine)
        k = keeper(
            CRAWLFLEET_REVISIT="fixed",
            CRAWLFLEET_REVISIT_INTERVAL_SECONDS=0.3,
            CRAWLFLEET_REVISIT_MIN_SECONDS=0.1,
        )
        scheduler.keep_revisits(k.policy)
        await scheduler.start(Spider("job"))
        scheduler.enqueue_request(Request("http://a.test/p"))
        scheduler.enqueue_request(Request("http://a.test/once"))
        got = await take(scheduler, engine, 2)
        rids = {r.url: scheduler.ledger.handed[r] for r in got}
        for request in got:  # as the middlewares leave them
            request.meta[REVISIT_META] = {"outcome": "changed", "version": 1, "url": request.url}
        engine.inprogress.clear()
        job = store["job"]
        await until(lambda: job.counters.get("tracked", 0) == 1)
        assert job.counters.get("acked", 0) == 2 and job.counters.get("waiting", 0) == 1
        (again,) = await take(scheduler, engine, 1)  # after its interval, the same rid
        assert again.url == "http://a.test/p" and scheduler.ledger.handed[again] == rids[again.url]
        assert again.meta[REVISIT_META]["visits"] == 1
        again.meta[REVISIT_META].update(outcome="gone", gone=3)
        engine.inprogress.clear()
        await until(lambda: job.counters.get("tracked", 0) == 0)
        assert job.counters.get("leased", 0) == 0
        events = [json.loads(e) for _id, e in await scheduler.frontier.changes()]  # type: ignore[attr-defined]
        assert [e["kind"] for e in events] == ["new", "untracked"]
        status = scheduler.node_status()
        assert {"changed", "not_modified", "gone", "kept", "untracked"} <= set(status["revisits"])
        await scheduler.stop("shutdown")

    run(body)
