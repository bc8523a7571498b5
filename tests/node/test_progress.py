"""The progress lines of a node's long phases: when they are due, and what they say.
(The lines of real re-crawls and campaigns: tests/node/test_failures.py,
tests/campaigns/test_campaign_progress.py.)"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from scrapy.settings import Settings

from crawlfleet.exceptions import ConfigError
from crawlfleet.node.progress import (
    Cadence,
    campaign_line,
    duration,
    progress_seconds,
    recrawl_line,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_cadence_says_nothing_in_a_short_phase_then_keeps_its_pace() -> None:
    clock = Clock()
    cadence = Cadence(15, clock)
    assert not cadence.due() and not cadence.due(change=True)  # no phase yet
    cadence.start()
    clock.now += 14.9
    assert not cadence.due() and not cadence.due(change=True)  # short: nothing
    clock.now += 0.1
    assert cadence.due() and not cadence.due()
    clock.now += 10
    assert not cadence.due()
    assert cadence.due(change=True)  # a change of a long phase: at once
    clock.now += 14
    assert not cadence.due()  # counted from the change's line
    clock.now += 1
    assert cadence.due()
    assert cadence.elapsed() == pytest.approx(40)
    cadence.stop()
    clock.now += 100
    assert not cadence.due(change=True) and cadence.elapsed() == 0.0
    never = Cadence(0, clock)
    never.start()
    clock.now += 1000
    assert not never.due() and not never.due(change=True)
    with pytest.raises(ValueError, match="seconds must be >= 0"):
        Cadence(-1)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (44.6, "45s"), (60, "1m00s"), (194, "3m14s"), (7620, "2h07m"), (-3, "0s")],
)
def test_durations_read_at_a_glance(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_a_recrawl_line_adds_up_and_names_the_sites_backing_off() -> None:
    progress = {"taken": 27, "queued": 15, "resolved": 9, "open": 3, "round": 2}
    line = recrawl_line(progress, 3, {"example.com": 8000})
    assert str(line) == (
        "Re-crawl round 2/3: 12 of 27 failure(s) re-fetched, 9 fixed, 3 failed again, "
        "15 waiting (site example.com backing off 8.0 s)"
    )
    many = {f"s{i}.org": 1000 * (5 - i) for i in range(5)}
    assert str(recrawl_line(progress, 3, many)).endswith(
        "15 waiting (sites s0.org 5.0 s, s1.org 4.0 s, s2.org 3.0 s, ... backing off)"
    )
    assert str(recrawl_line(progress, 3)).endswith("3 failed again, 15 waiting")
    over = {**progress, "queued": 0, "resolved": 24}
    assert str(recrawl_line(over, 3, seconds=194)) == (
        "Re-crawl round 2/3 done in 3m14s: 27 of 27 failure(s) re-fetched, 24 fixed, 3 failed again"
    )


def test_a_campaign_line_has_progress_rate_and_eta() -> None:
    units = {"done": 140, "failed": 3, "fed": 4, "leased": 1, "pending": 0}
    status: dict[str, Any] = {
        "name": "e2e",
        "state": "running",
        "total": 300,
        "units": units,
        "progress": 143 / 300,
        "rate_per_min": 126.0,
        "eta_seconds": 75,
    }
    assert str(campaign_line(status, 412)) == (
        "Campaign 'e2e' (running): 140/300 units done, 3 failed (47.7 %), 5 in flight, "
        "2.1 units/s, ETA 1m15s, 412 request(s) left in the job"
    )
    slow = {**status, "rate_per_min": 1.5, "eta_seconds": None, "state": "paused"}
    slow["units"] = {**units, "fed": 0, "leased": 0, "pending": 2}
    assert str(campaign_line(slow)) == (
        "Campaign 'e2e' (paused): 140/300 units done, 3 failed (47.7 %), 2 to feed again, "
        "1.5 units/min"
    )


def test_a_line_is_logged_with_its_arguments(caplog: pytest.LogCaptureFixture) -> None:
    line = recrawl_line({"taken": 2, "queued": 1, "resolved": 1, "open": 0, "round": 1}, 1)
    with caplog.at_level(logging.INFO):
        line.log(logging.getLogger("crawlfleet.test"))
    (record,) = caplog.records
    assert record.msg == line.fmt and record.args == line.args
    assert record.getMessage() == str(line)


def test_a_wrong_cadence_is_refused_with_the_settings_name() -> None:
    assert progress_seconds(Settings({"CRAWLFLEET_PROGRESS_SECONDS": "0"})) == 0.0
    assert progress_seconds(Settings({"CRAWLFLEET_PROGRESS_SECONDS": 2.5})) == 2.5
    for bad in (-1, "soon", True):
        with pytest.raises(ConfigError, match="CRAWLFLEET_PROGRESS_SECONDS must be"):
            progress_seconds(Settings({"CRAWLFLEET_PROGRESS_SECONDS": bad}))
