"""The revisit settings, read and checked: ``CRAWLFLEET_REVISIT*`` as a
:class:`~crawlfleet.revisit.policy.RevisitPolicy` (:func:`revisit_mode`,
:func:`revisit_policy`). A wrong value raises ConfigError naming the setting (and, in
``CRAWLFLEET_REVISIT_RULES``, the rule and its key)."""

from __future__ import annotations

import json
import re
from typing import Any

from scrapy.settings import BaseSettings

from crawlfleet.exceptions import ConfigError
from crawlfleet.revisit.policy import POLICIES, RevisitPolicy, Rule
from crawlfleet.settings.access import (
    get_bool,
    get_choice,
    get_float,
    get_int,
    get_str_list,
    raw_setting,
)

__all__ = ["RULE_KEYS", "revisit_mode", "revisit_policy"]

#: The keys a rule of CRAWLFLEET_REVISIT_RULES may have.
RULE_KEYS = ("pattern", "interval", "min", "max", "policy")
RULES = "CRAWLFLEET_REVISIT_RULES"


def revisit_mode(settings: BaseSettings) -> str:
    """CRAWLFLEET_REVISIT: "off", "fixed" or "adaptive"."""
    return get_choice(settings, "CRAWLFLEET_REVISIT", POLICIES)


def revisit_policy(settings: BaseSettings) -> RevisitPolicy:
    """The job's revisit policy as *settings* say (CRAWLFLEET_REVISIT "off" gives a
    policy that tracks nothing)."""
    mode = revisit_mode(settings)
    interval = get_float(settings, "CRAWLFLEET_REVISIT_INTERVAL_SECONDS", minimum=0)
    lo = get_float(settings, "CRAWLFLEET_REVISIT_MIN_SECONDS", minimum=0)
    hi = get_float(settings, "CRAWLFLEET_REVISIT_MAX_SECONDS", minimum=0)
    where = "CRAWLFLEET_REVISIT_INTERVAL_SECONDS"
    _check_bounds(where, interval, lo, hi, "CRAWLFLEET_REVISIT_MIN_SECONDS",
                  "CRAWLFLEET_REVISIT_MAX_SECONDS")  # fmt: skip
    default = Rule(None, mode, interval, lo, hi)
    faster = get_float(settings, "CRAWLFLEET_REVISIT_FASTER", minimum=0, strict=True)
    if faster >= 1:
        raise ConfigError(f"CRAWLFLEET_REVISIT_FASTER must be below 1, got {faster:g}")
    slower = get_float(settings, "CRAWLFLEET_REVISIT_SLOWER", minimum=1, strict=True)
    return RevisitPolicy(
        default=default,
        rules=tuple(
            _rule(i, raw, default) for i, raw in enumerate(_rules(raw_setting(settings, RULES)))
        ),
        faster=faster,
        slower=slower,
        gone_after=get_int(settings, "CRAWLFLEET_REVISIT_GONE_AFTER", minimum=1),
        ignore_fields=frozenset(get_str_list(settings, "CRAWLFLEET_REVISIT_IGNORE_FIELDS")),
        conditional=get_bool(settings, "CRAWLFLEET_REVISIT_CONDITIONAL"),
    )


def _rules(value: Any) -> list[Any]:
    if isinstance(value, str):  # from -s or the environment: a JSON array
        try:
            value = json.loads(value) if value.strip() else []
        except ValueError as exc:
            raise ConfigError(f"{RULES} must be a list or a JSON array: {exc}") from None
    if not isinstance(value, list | tuple):
        raise ConfigError(f"{RULES} must be a list of rules, got {value!r}")
    return list(value)


def _rule(i: int, raw: Any, default: Rule) -> Rule:
    where = f"{RULES}[{i}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a dict with a pattern, got {raw!r}")
    unknown = sorted(str(k) for k in raw if k not in RULE_KEYS)
    if unknown:
        raise ConfigError(f"{where} has unknown key {unknown[0]!r}; known: {', '.join(RULE_KEYS)}")
    pattern = raw.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError(f"{where}.pattern must be a regular expression, got {pattern!r}")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"{where}.pattern is not a regular expression: {exc}") from None
    policy = raw.get("policy", default.policy if default.policy != "off" else "fixed")
    if policy not in POLICIES:
        shown = ", ".join(repr(p) for p in POLICIES)
        raise ConfigError(f"{where}.policy must be one of {shown}; got {policy!r}")
    interval = _seconds(where, raw, "interval", default.interval)
    lo = _seconds(where, raw, "min", default.min_seconds)
    hi = _seconds(where, raw, "max", default.max_seconds)
    if interval > 0 and policy != "off":
        _check_bounds(f"{where}.interval", interval, lo, hi, f"{where}.min", f"{where}.max")
    return Rule(compiled, policy, interval, lo, hi)


def _seconds(where: str, raw: dict[str, Any], key: str, default: float) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{where}.{key} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def _check_bounds(
    name: str, interval: float, lo: float, hi: float, lo_name: str, hi_name: str
) -> None:
    if lo > hi:
        raise ConfigError(f"{lo_name} ({lo:g}) must be at most {hi_name} ({hi:g})")
    if interval > 0 and not lo <= interval <= hi:
        raise ConfigError(
            f"{name} ({interval:g}) must be between {lo_name} ({lo:g}) and {hi_name} ({hi:g})"
        )
