"""Typed, validated reads of settings (used by ``from_crawler`` and config classes).

A setting that is absent (or ``None``, e.g. settings built without the add-on) takes its
default from :mod:`crawlfleet.settings.default_settings`. A wrong value
raises :class:`~crawlfleet.exceptions.ConfigError` naming the setting.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from scrapy.settings import BaseSettings

from crawlfleet.exceptions import ConfigError
from crawlfleet.settings import default_settings

__all__ = [
    "component_path",
    "defaults",
    "get_bool",
    "get_choice",
    "get_dict",
    "get_float",
    "get_int",
    "get_path",
    "get_share",
    "get_str",
    "get_str_list",
    "raw_setting",
]

#: The kinds of number a setting is read as.
N = TypeVar("N", int, float)


def component_path(value: Any) -> str:
    """A component setting's key or value as a dotted path (a class given as an object
    too)."""
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return str(value or "")


def defaults() -> dict[str, Any]:
    """Name -> default value of every crawlfleet setting."""
    return {k: getattr(default_settings, k) for k in dir(default_settings) if k.isupper()}


def raw_setting(settings: BaseSettings, name: str) -> Any:
    """The value of *name*, or its default when it is not set."""
    value = settings.get(name)
    if value is not None:
        return value
    known = defaults()
    if name not in known:
        raise ConfigError(f"{name} is not a known crawlfleet setting")
    return copy.deepcopy(known[name])  # defaults may be dicts and lists: never shared


def get_bool(settings: BaseSettings, name: str) -> bool:
    """*name* as a boolean: True/False, 1/0 or the strings true/false/1/0."""
    value = raw_setting(settings, name)
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    raise ConfigError(f"{name} must be true or false, got {value!r}")


def get_int(settings: BaseSettings, name: str, *, minimum: int) -> int:
    """*name* as an integer >= *minimum*."""
    value, number = _number(settings, name, int, "an integer")
    if number < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value!r}")
    return number


def get_float(settings: BaseSettings, name: str, *, minimum: float, strict: bool = False) -> float:
    """*name* as a number >= *minimum* (> *minimum* when *strict*)."""
    value, number = _number(settings, name, float, "a number")
    if number < minimum or (strict and number == minimum):
        relation = ">" if strict else ">="
        raise ConfigError(f"{name} must be {relation} {minimum}, got {value!r}")
    return number


def get_share(settings: BaseSettings, name: str) -> float:
    """*name* as a number from 0 to 1."""
    value, number = _number(settings, name, float, "a number from 0 to 1")
    if not 0 <= number <= 1:
        raise ConfigError(f"{name} must be a number from 0 to 1, got {value!r}")
    return number


def _number(
    settings: BaseSettings, name: str, kind: Callable[[Any], N], what: str
) -> tuple[Any, N]:
    """*name* as set, and as *kind* (``int``, ``float``); ConfigError saying it must be
    *what* for a value that is not one (a boolean is not a number here)."""
    value = raw_setting(settings, name)
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be {what}, got {value!r}")
    try:
        return value, kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be {what}, got {value!r}") from None


def get_str(settings: BaseSettings, name: str) -> str:
    """*name* as a string (numbers are not accepted in place of text)."""
    value = raw_setting(settings, name)
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be a string, got {value!r}")
    return value


def get_path(settings: BaseSettings, name: str) -> Path:
    """*name* as a filesystem path."""
    value = raw_setting(settings, name)
    if not isinstance(value, str | Path) or not str(value):
        raise ConfigError(f"{name} must be a non-empty path, got {value!r}")
    return Path(value)


def get_choice(settings: BaseSettings, name: str, choices: tuple[str, ...]) -> str:
    """*name* as one of *choices* (compared in lower case)."""
    value = str(raw_setting(settings, name)).strip().lower()
    if value not in choices:
        shown = ", ".join(repr(c) for c in choices)
        raise ConfigError(f"{name} must be one of {shown}; got {value!r}")
    return value


def get_dict(settings: BaseSettings, name: str) -> dict[str, Any]:
    """*name* as a dict with string keys (a JSON object string is accepted)."""
    value = raw_setting(settings, name)
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError as exc:
            raise ConfigError(f"{name} must be a dict or a JSON object: {exc}") from None
    if isinstance(value, BaseSettings):
        value = value.copy_to_dict()
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f"{name} must be a dict with string keys, got {value!r}")
    return dict(value)


def get_str_list(settings: BaseSettings, name: str) -> list[str]:
    """*name* as a list of strings (a JSON array or a comma-separated string is accepted)."""
    value = raw_setting(settings, name)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError as exc:
                raise ConfigError(f"{name} must be a list or a JSON array: {exc}") from None
        else:
            value = [part.strip() for part in text.split(",") if part.strip()]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{name} must be a list of strings, got {value!r}")
    return list(value)
