"""Every field processor, alone and in a chain."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any
from urllib.parse import urljoin

import pytest

from crawlfleet.spiders.processors import ProcessorContext, apply_processors
from crawlfleet.spiders.spec import ProcessorSpec

CONTEXT = ProcessorContext(lambda url: urljoin("http://shop.example/a/b.html", url))


def run(values: list[Any], *steps: ProcessorSpec) -> tuple[list[Any], list[str]]:
    return apply_processors(values, steps, CONTEXT)


P = ProcessorSpec


@pytest.mark.parametrize(
    ("values", "step", "expected"),
    [
        ([" a ", "\n", "b\t"], P("strip"), ["a", "b"]),
        (["£12£", "££"], P("strip", "£"), ["12"]),
        ([" a  b\n c ", "  "], P("normalize_space"), ["a b c"]),
        (["MiXed"], P("lower"), ["mixed"]),
        (["MiXed"], P("upper"), ["MIXED"]),
        (["a", "b", "c"], P("join"), ["a b c"]),
        (["a", "b"], P("join", ", "), ["a, b"]),
        ([], P("join"), []),
        (["1,299.00"], P("replace", (",", "")), ["1299.00"]),
        (["v1.2"], P("replace", (r"v(\d)", r"version \1")), ["version 1.2"]),
        (
            ["c.html", "/x", " http://other.example/y ", "?page=2"],
            P("absolute_url"),
            [
                "http://shop.example/a/c.html",
                "http://shop.example/x",
                "http://other.example/y",
                "http://shop.example/a/b.html?page=2",
            ],
        ),
        ([" 42 ", "-7"], P("int"), [42, -7]),
        (["2.5", "1e3"], P("float"), [2.5, 1000.0]),
        (["12.99", " 0.10 "], P("decimal"), [Decimal("12.99"), Decimal("0.10")]),
        (["2024-05-09"], P("date"), [dt.date(2024, 5, 9)]),
        (
            ["2024-05-09T10:30:00+02:00"],
            P("date"),
            [dt.datetime(2024, 5, 9, 10, 30, tzinfo=dt.timezone(dt.timedelta(hours=2)))],
        ),
        (["09/05/2024"], P("date", ("%d/%m/%Y",)), [dt.date(2024, 5, 9)]),
        (["May 9, 2024"], P("date", ("%d/%m/%Y", "%B %d, %Y")), [dt.date(2024, 5, 9)]),
        (
            ["09.05.2024 10:30"],
            P("date", ("%d.%m.%Y %H:%M",)),
            [dt.datetime(2024, 5, 9, 10, 30)],
        ),
    ],
)
def test_processor(values: list[Any], step: ProcessorSpec, expected: list[Any]) -> None:
    assert run(values, step) == (expected, [])


@pytest.mark.parametrize(
    ("value", "step", "problem"),
    [
        ("12.5", P("int"), "cannot convert '12.5' to int"),
        ("abc", P("float"), "cannot convert 'abc' to float"),
        ("nan", P("float"), "cannot convert 'nan' to float"),
        ("12,99", P("decimal"), "cannot convert '12,99' to decimal"),
        ("Infinity", P("decimal"), "cannot convert 'Infinity' to decimal"),
        ("yesterday", P("date"), "cannot read 'yesterday' as a date (ISO 8601)"),
        (
            "2024/05/09",
            P("date", ("%d.%m.%Y", "%Y-%m-%d")),
            "cannot read '2024/05/09' as a date ('%d.%m.%Y' or '%Y-%m-%d')",
        ),
    ],
)
def test_conversion_failures_drop_the_value(value: str, step: ProcessorSpec, problem: str) -> None:
    assert run([value, "7"] if step.name == "int" else [value], step) == (
        [7] if step.name == "int" else [],
        [problem],
    )


def test_chain_applies_in_order() -> None:
    values = ["  Price: 1,299.50 EUR ", ""]
    steps = (P("strip"), P("replace", (r"[^\d.,]", "")), P("replace", (",", "")), P("decimal"))
    assert run(values, *steps) == ([Decimal("1299.50")], [])


def test_bad_replacement_group_is_a_problem_not_a_crash() -> None:
    assert run(["abc"], P("replace", ("b", r"\9"))) == (
        ["abc"],
        [r"replace '\\9': invalid group reference 9 at position 1"],
    )
