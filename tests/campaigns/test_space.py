"""A campaign's parameter space: lazy units, dates by day, week and month, extension
keeps every existing unit's index, templates checked."""

from __future__ import annotations

import datetime as dt

import pytest

from crawlfleet.campaigns.space import ParamSpace, check_template


def test_units_vary_dates_slowest_and_are_computed_from_their_index() -> None:
    space = ParamSpace.from_dict(
        {"from": "2026-01-30", "to": "2026-02-02", "categories": ["a", "b"], "keywords": ["x"]}
    )
    assert space.size() == 8
    units = list(space.units())
    assert [u.label for u in units[:3]] == ["2026-01-30/a/x", "2026-01-30/b/x", "2026-01-31/a/x"]
    assert units[-1].label == "2026-02-02/b/x"
    assert space.unit(5) == units[5]
    with pytest.raises(IndexError):
        space.unit(8)


@pytest.mark.parametrize(
    ("step", "to", "dates"),
    [
        ("day", "2026-01-31", 31),
        ("week", "2026-01-29", 5),
        ("week", "2026-01-28", 4),
        ("month", "2026-12-31", 12),
        ("month", "2026-05-30", 4),
    ],
)
def test_dates_by_step(step: str, to: str, dates: int) -> None:
    space = ParamSpace.from_dict(
        {"from": "2026-01-31" if step == "month" else "2026-01-01", "to": to, "step": step}
    )
    assert space.size() == dates
    last = space.unit(dates - 1).date
    assert last is not None and last <= dt.date.fromisoformat(to)
    if step == "month":  # the 31st of short months is their last day
        assert space.unit(1).date == dt.date(2026, 2, 28)


def test_extending_keeps_every_unit_in_place() -> None:
    space = ParamSpace.from_dict(
        {"from": "2026-01-01", "to": "2026-01-10", "categories": ["a", "b"]}
    )
    longer = space.extended(dt.date(2026, 1, 20))
    assert longer.size() == 40
    assert [longer.unit(i) for i in range(20)] == list(space.units())
    with pytest.raises(ValueError, match="before the current end"):
        space.extended(dt.date(2026, 1, 5))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, "needs dates, categories or keywords"),
        ({"from": "2026-01-01"}, "both a start"),
        ({"from": "2026-02-01", "to": "2026-01-01"}, "before the start"),
        ({"from": "2026-13-01", "to": "2026-12-01"}, "from must be a date"),
        ({"categories": ["a", "a"]}, "repeat"),
        ({"categories": ["a"], "step": "year"}, "step must be one of"),
        ({"colour": "red"}, "unknown parameter"),
    ],
)
def test_bad_spaces_say_what_is_wrong(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ParamSpace.from_dict(raw)


def test_templates() -> None:
    space = ParamSpace.from_dict({"from": "2026-03-04", "to": "2026-03-05", "keywords": ["a b"]})
    unit = space.unit(0)
    assert unit.url("http://x/{date:%Y/%m/%d}?q={keyword}") == "http://x/2026/03/04?q=a+b"
    assert unit.url("http://x/{date}/{keyword_raw}") == "http://x/2026-03-04/a b"
    check_template("http://x/{date}?q={keyword}", space)
    for bad, message in (
        ("http://x/{category}", "which the campaign has not"),
        ("http://x/{colour}", "unknown field"),
        ("ftp://x/{date}?q={keyword}", "must start with http"),
        ("http://x/{date}", r"must use \{keyword\}"),
        ("http://x/{date", "url template"),
    ):
        with pytest.raises(ValueError, match=message):
            check_template(bad, space)
