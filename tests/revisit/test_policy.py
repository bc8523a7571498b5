"""The revisit policy, pure: rules by URL pattern, fixed and adaptive intervals within
their bounds, hints from caching headers and sitemaps; the change fingerprint."""

from __future__ import annotations

import re
from email.utils import formatdate

import pytest

from crawlfleet.revisit.fingerprint import change_fingerprint
from crawlfleet.revisit.policy import RevisitPolicy, Rule, cache_hint, changefreq_seconds
from crawlfleet.revisit.state import (
    CHANGED,
    FAILED,
    GONE,
    HANDED,
    NOT_MODIFIED,
    UNCHANGED,
    handed_on,
    stored,
)

HOUR, DAY = 3600.0, 86400.0


def adaptive(interval: float = DAY, lo: float = HOUR, hi: float = 30 * DAY) -> RevisitPolicy:
    return RevisitPolicy(default=Rule(None, "adaptive", interval, lo, hi))


def test_rules_by_url_pattern_first_match_wins() -> None:
    listing = Rule(re.compile(r"/list"), "fixed", HOUR, HOUR, DAY)
    never = Rule(re.compile(r"\.pdf$"), "off", DAY, HOUR, DAY)
    zero = Rule(re.compile(r"/tmp/"), "fixed", 0, 0, DAY)
    policy = RevisitPolicy(
        default=Rule(None, "fixed", DAY, HOUR, 7 * DAY),
        rules=(listing, never, zero, Rule(re.compile("/list/x"), "fixed", 5, 1, 9)),
    )
    assert policy.rule_for("http://a.test/list/x") is listing  # the first that matches
    assert policy.rule_for("http://a.test/item/1") is policy.default
    assert policy.tracks("http://a.test/item/1")
    assert not policy.tracks("http://a.test/doc.pdf")
    assert not policy.tracks("http://a.test/tmp/1")
    assert policy.next_interval(listing, 5 * HOUR, CHANGED) == HOUR  # fixed: the rule's


def test_adaptive_comes_back_sooner_after_a_change_later_after_none() -> None:
    policy = adaptive()
    rule = policy.default
    assert policy.next_interval(rule, None, CHANGED) == DAY  # the first visit
    assert policy.next_interval(rule, DAY, CHANGED) == DAY / 2
    assert policy.next_interval(rule, DAY, UNCHANGED) == DAY * 1.5
    assert policy.next_interval(rule, DAY, NOT_MODIFIED) == DAY * 1.5
    assert policy.next_interval(rule, DAY, FAILED) == DAY  # a failure keeps the interval
    assert policy.next_interval(rule, DAY, GONE) == DAY
    # bounded by min and max
    assert policy.next_interval(rule, HOUR * 1.5, CHANGED) == HOUR
    assert policy.next_interval(rule, 25 * DAY, UNCHANGED) == 30 * DAY
    # a page that keeps changing converges on min, one that never does on max
    interval: float | None = None
    for _ in range(20):
        interval = policy.next_interval(rule, interval, CHANGED)
    assert interval == HOUR
    for _ in range(20):
        interval = policy.next_interval(rule, interval, UNCHANGED)
    assert interval == 30 * DAY


def test_hints_bound_the_adaptive_interval_within_min_and_max() -> None:
    policy = adaptive()
    rule = policy.default
    # max-age: not sooner than that (but never beyond max)
    assert policy.next_interval(rule, DAY, CHANGED, hint=2 * DAY) == 2 * DAY
    assert policy.next_interval(rule, DAY, CHANGED, hint=90 * DAY) == 30 * DAY
    assert policy.next_interval(rule, DAY, UNCHANGED, hint=60.0) == 1.5 * DAY
    # changefreq: not later than that (but never below min)
    assert policy.next_interval(rule, DAY, UNCHANGED, changefreq="hourly") == HOUR
    assert policy.next_interval(rule, DAY, UNCHANGED, changefreq="always") == HOUR
    assert policy.next_interval(rule, DAY, UNCHANGED, changefreq="weekly") == 1.5 * DAY
    assert policy.next_interval(rule, DAY, UNCHANGED, changefreq="sometimes") == 1.5 * DAY
    # fixed ignores hints
    fixed = Rule(None, "fixed", DAY, HOUR, 30 * DAY)
    assert policy.next_interval(fixed, DAY, CHANGED, hint=5 * DAY, changefreq="hourly") == DAY


def test_changefreq_words() -> None:
    assert changefreq_seconds("Daily ") == DAY
    assert changefreq_seconds("never") == float("inf")
    assert changefreq_seconds(None) is None and changefreq_seconds(3) is None


def test_cache_hints_from_max_age_or_expires() -> None:
    now = 1_800_000_000.0
    assert cache_hint("public, max-age=600", None, None, now) == 600
    assert cache_hint("max-age=0", None, None, now) is None
    assert cache_hint("no-cache, max-age=600", None, None, now) is None
    assert cache_hint("no-store", formatdate(now + 60, usegmt=True), None, now) is None
    # Expires, from the response's Date, else from now
    expires = formatdate(now + 7200, usegmt=True)
    assert cache_hint(None, expires, formatdate(now + 3600, usegmt=True), now) == 3600
    assert cache_hint("private", expires, None, now) == 7200
    assert cache_hint(None, formatdate(now - 5, usegmt=True), None, now) is None  # stale
    assert cache_hint(None, "0", None, now) is None  # unreadable (as servers send it)
    assert cache_hint(None, None, None, now) is None


def test_the_state_between_visits_and_when_handed_on() -> None:
    state = {"visits": 2, "kept": 1, "etag": '"a"', "outcome": FAILED, "url": "u", "cond": 1}
    assert stored(state) == {"visits": 2, "kept": 1, "etag": '"a"'}
    taken = handed_on(state)
    assert taken == {"visits": 2, "etag": '"a"'}  # not kept (counted) yet
    assert state["outcome"] == HANDED


def test_the_change_fingerprint_is_of_what_is_extracted() -> None:
    a = {"title": "T", "price": "1", "seen": "12:00", "version": 1}
    b = {"title": "T", "price": "1", "seen": "12:05", "version": 2, "changed_at": "x"}
    assert change_fingerprint([a], []) != change_fingerprint([b], [])
    # ignored fields and crawlfleet's stamps are left out
    assert change_fingerprint([a], [], {"seen"}) == change_fingerprint([b], [], {"seen"})
    assert change_fingerprint([a], [], {"seen"}) != change_fingerprint(
        [{**a, "price": "2"}], [], {"seen"}
    )
    # the same fields in another order: the same; requests do not count with items
    assert change_fingerprint([{"price": "1", "title": "T"}], ["http://x"]) == change_fingerprint(
        [{"title": "T", "price": "1"}], []
    )
    # a listing: the set of its links
    assert change_fingerprint([], ["b", "a", "a"]) == change_fingerprint([], ["a", "b"])
    assert change_fingerprint([], ["a", "b"]) != change_fingerprint([], ["a", "c"])
    assert len(change_fingerprint([], [])) == 24


@pytest.mark.parametrize("outcome", [CHANGED, UNCHANGED])
def test_slower_and_faster_factors(outcome: str) -> None:
    policy = RevisitPolicy(default=Rule(None, "adaptive", 100, 1, 1000), faster=0.25, slower=2)
    expected = 25 if outcome == CHANGED else 200
    assert policy.next_interval(policy.default, 100, outcome) == expected
