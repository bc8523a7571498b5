"""A node says why its slots went back: by cause in its status, and once a minute at
most in its log, naming the cause most of them had with its figures."""

from __future__ import annotations

import pytest
from scrapy import Spider
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from crawlfleet.node.lateness import CAUSES, WARN_EVERY_SECONDS, Lateness
from crawlfleet.node.stats import NodeStats


def lateness(blocked: float = 0.08, reply: float = 0.025) -> tuple[Lateness, NodeStats]:
    stats = NodeStats(MemoryStatsCollector(get_crawler(Spider)))
    late = Lateness(stats, blocked=lambda: blocked, reply=lambda: reply, per_domain=1)
    return late, stats


def test_the_status_counts_each_cause_with_the_figures_behind_them() -> None:
    late, stats = lateness()
    stats.inc("crawlfleet/scheduler/late/loop", 3)
    stats.inc("crawlfleet/scheduler/late/wire")
    status = late()["late"]
    assert {c: status[c] for c in CAUSES} == {"loop": 3, "way": 0, "download_slot": 0, "wire": 1}
    assert status["loop_blocked_ms"] == 80.0 and status["redis_reply_ms"] == 25.0


def test_the_log_names_the_main_cause_once_a_minute_at_most(
    caplog: pytest.LogCaptureFixture,
) -> None:
    late, stats = lateness()
    figures = late.figures()
    start = 1000.0
    late._told_at = start
    stats.inc("crawlfleet/scheduler/late/loop", 5)
    stats.inc("crawlfleet/scheduler/late/download_slot", 2)
    assert late.say(late.counts(), figures, start + 10) is None  # not a minute yet
    said = late.say(late.counts(), figures, start + WARN_EVERY_SECONDS)
    assert said is not None
    assert said.startswith("7 rate-limited requests missed their slots in the last 60 s")
    assert "5 because this node's event loop was blocked up to 80 ms" in said
    # the next minute counts from there: the slow site's slots are what is new
    stats.inc("crawlfleet/scheduler/late/download_slot", 4)
    said = late.say(late.counts(), figures, start + 2 * WARN_EVERY_SECONDS)
    assert said is not None and said.startswith("4 rate-limited")
    assert "download slot was full" in said and "CONCURRENT_REQUESTS_PER_DOMAIN is 1" in said
    # a quiet minute says nothing
    assert late.say(late.counts(), figures, start + 3 * WARN_EVERY_SECONDS) is None
