"""Field processors: small steps applied, in order, to the list of extracted strings.

Every processor maps a list of values to a list of values. Text processors work on
strings; a conversion (``int``, ``float``, ``decimal``, ``date``) must come last (the spec
loader enforces it). A value a conversion cannot read is dropped and reported as a
problem, so the item records it in ``_warnings`` instead of failing the page.

============== ==========================================================================
processor      effect
============== ==========================================================================
strip          strip whitespace (or the given characters); drop values left empty
normalize_space collapse runs of whitespace to one space and strip; drop empty values
lower, upper   change case
join           join all values into one, with a space (or the given separator)
replace        ``[regex, replacement]``: ``re.sub`` on every value
absolute_url   resolve against the page URL (honours ``<base href>``)
int, float     numbers (``int`` accepts ``"1e3"``-free integer text only)
decimal        :class:`decimal.Decimal`, exact
date           ISO 8601 when bare; otherwise try each strptime format in order. A format
               without a time part gives a :class:`datetime.date`, else a
               :class:`datetime.datetime`
============== ==========================================================================
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from crawlfleet.spiders.spec import ProcessorSpec

__all__ = ["ProcessorContext", "apply_processors"]

_TIME_DIRECTIVES = re.compile(r"%[HIMSfpXcz]")


class ProcessorContext:
    """What processors may need about the page: ``urljoin`` resolves relative URLs."""

    def __init__(self, urljoin: Callable[[str], str]) -> None:
        self.urljoin = urljoin


def apply_processors(
    values: Sequence[Any], processors: Sequence[ProcessorSpec], context: ProcessorContext
) -> tuple[list[Any], list[str]]:
    """Run *processors* over *values*; return the new values and the problems met.

    A problem is a sentence such as ``cannot convert 'abc' to int``; the value that
    caused it is dropped.
    """
    out = list(values)
    problems: list[str] = []
    for proc in processors:
        out = _STEPS[proc.name](out, proc.arg, context, problems)
    return out, problems


_Step = Callable[[list[Any], Any, ProcessorContext, list[str]], list[Any]]


def _texts(values: list[Any]) -> list[str]:
    return [v if isinstance(v, str) else str(v) for v in values]


def _strip(values: list[Any], arg: Any, ctx: ProcessorContext, problems: list[str]) -> list[Any]:
    stripped = (v.strip(arg) for v in _texts(values))
    return [v for v in stripped if v]


def _normalize_space(
    values: list[Any], arg: Any, ctx: ProcessorContext, problems: list[str]
) -> list[Any]:
    normalized = (" ".join(v.split()) for v in _texts(values))
    return [v for v in normalized if v]


def _lower(values: list[Any], arg: Any, ctx: ProcessorContext, problems: list[str]) -> list[Any]:
    return [v.lower() for v in _texts(values)]


def _upper(values: list[Any], arg: Any, ctx: ProcessorContext, problems: list[str]) -> list[Any]:
    return [v.upper() for v in _texts(values)]


def _join(values: list[Any], arg: Any, ctx: ProcessorContext, problems: list[str]) -> list[Any]:
    if not values:
        return []
    return [(" " if arg is None else arg).join(_texts(values))]


def _replace(values: list[Any], arg: Any, ctx: ProcessorContext, problems: list[str]) -> list[Any]:
    pattern, replacement = arg
    try:
        return [re.sub(pattern, replacement, v) for v in _texts(values)]
    except re.error as exc:  # a bad group reference in the replacement
        problems.append(f"replace {replacement!r}: {exc}")
        return list(values)


def _absolute_url(
    values: list[Any], arg: Any, ctx: ProcessorContext, problems: list[str]
) -> list[Any]:
    return [ctx.urljoin(v.strip()) for v in _texts(values)]


def _converter(kind: str, convert: Callable[[str], Any]) -> _Step:
    def step(values: list[Any], arg: Any, ctx: ProcessorContext, problems: list[str]) -> list[Any]:
        out = []
        for value in _texts(values):
            try:
                out.append(convert(value.strip()))
            except (ValueError, ArithmeticError):
                problems.append(f"cannot convert {value!r} to {kind}")
        return out

    return step


def _to_decimal(text: str) -> Decimal:
    value = Decimal(text)
    if not value.is_finite():
        raise InvalidOperation(text)
    return value


def _to_float(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(text)
    return value


def _date(values: list[Any], arg: Any, ctx: ProcessorContext, problems: list[str]) -> list[Any]:
    out: list[Any] = []
    for value in _texts(values):
        parsed = _parse_date(value.strip(), arg)
        if parsed is None:
            formats = "ISO 8601" if arg is None else " or ".join(repr(f) for f in arg)
            problems.append(f"cannot read {value!r} as a date ({formats})")
        else:
            out.append(parsed)
    return out


def _parse_date(text: str, formats: Sequence[str] | None) -> dt.date | dt.datetime | None:
    if formats is None:
        try:
            if "T" in text or " " in text or len(text) > 10:
                return dt.datetime.fromisoformat(text)
            return dt.date.fromisoformat(text)
        except ValueError:
            return None
    for fmt in formats:
        try:
            parsed = dt.datetime.strptime(text, fmt)
        except ValueError:
            continue
        return parsed if _TIME_DIRECTIVES.search(fmt) else parsed.date()
    return None


_STEPS: dict[str, _Step] = {
    "strip": _strip,
    "normalize_space": _normalize_space,
    "lower": _lower,
    "upper": _upper,
    "join": _join,
    "replace": _replace,
    "absolute_url": _absolute_url,
    "int": _converter("int", int),
    "float": _converter("float", _to_float),
    "decimal": _converter("decimal", _to_decimal),
    "date": _date,
}
