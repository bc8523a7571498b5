"""What a loop says of its unexpected failures (crawlfleet.outage.Failures): once with
the traceback, then once a minute, never once a second."""

from __future__ import annotations

import logging

import pytest

from crawlfleet.outage import Failures


def fail(failures: Failures, message: str) -> None:
    try:
        raise ValueError(message)
    except ValueError:
        failures.failed()


def test_a_failing_loop_says_so_once_then_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.failures")
    failures = Failures("the sync loop", log, every=0.2)
    with caplog.at_level(logging.INFO, logger="test.failures"):
        fail(failures, "min() arg is an empty sequence")
        for _ in range(500):  # a loop retrying every second for 8 minutes
            fail(failures, "min() arg is an empty sequence")
        records = list(caplog.records)
        assert len(records) == 1  # said once, with the traceback
        assert records[0].getMessage() == "the sync loop failed" and records[0].exc_info
        failures._said_at -= 0.2  # a minute later (every=0.2 s here)
        fail(failures, "the last one")
        assert caplog.records[-1].getMessage() == (
            "the sync loop failed 501 more times since it was last said; "
            "the last: ValueError: the last one"
        )
        assert caplog.records[-1].exc_info is None
        failures.succeeded()
        assert caplog.records[-1].getMessage() == "the sync loop works again after 502 failures"
        failures.succeeded()
        fail(failures, "again")  # a new run of failures starts with its traceback
        assert caplog.records[-1].getMessage() == "the sync loop failed"
        assert caplog.records[-1].exc_info
    assert len(caplog.records) == 4
