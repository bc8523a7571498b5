"""Reading a spec file and turning every problem into a message a person can act on.

A problem is reported as ``FILE[:LINE]: PATH: WHAT``, where PATH is the dotted path
inside the spec (``items.book.fields.price.css``, ``links[0].allow[1]``) and LINE is
the YAML line of that key (JSON files have no line numbers).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from crawlfleet.exceptions import ConfigError
from crawlfleet.spiders.schema import SPEC_SCHEMA

__all__ = [
    "LineMap",
    "Problem",
    "SpecError",
    "format_path",
    "quote",
    "read_spec_file",
    "schema_problems",
    "suggest",
]

PathT = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a spec: where (``path``; ``None`` for the file itself) and what."""

    path: PathT | None
    message: str


def format_path(path: PathT) -> str:
    """``("links", 0, "allow")`` -> ``links[0].allow``; the empty path is ``(top level)``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


class LineMap:
    """Line numbers (1-based) of the keys and list entries of a YAML document."""

    def __init__(self, root: yaml.Node | None) -> None:
        self._root = root

    def line(self, path: PathT) -> int | None:
        """The line of the deepest node of *path* that exists, or ``None`` without YAML."""
        node = self._root
        if node is None:
            return None
        line: int = node.start_mark.line + 1
        for part in path:
            child: yaml.Node | None = None
            if isinstance(node, yaml.MappingNode):
                for key_node, value_node in node.value:
                    if key_node.value == str(part):
                        line, child = key_node.start_mark.line + 1, value_node
                        break
            elif (
                isinstance(node, yaml.SequenceNode)
                and isinstance(part, int)
                and 0 <= part < len(node.value)
            ):
                child = node.value[part]
                line = child.start_mark.line + 1
            if child is None:
                break
            node = child
        return line


class SpecError(ConfigError):
    """A spec file is invalid. ``problems`` lists every problem found, in file order.

    ``str(error)`` is one ``FILE[:LINE]: PATH: WHAT`` line per problem.
    """

    def __init__(self, file: str, problems: Sequence[Problem], lines: LineMap | None = None):
        self.file = file
        if lines is not None:
            problems = sorted(problems, key=lambda p: _line_of(p, lines))
        self.problems = tuple(problems)
        self.lines = [self.format(p, lines) for p in self.problems]
        super().__init__("\n".join(self.lines))

    def format(self, problem: Problem, lines: LineMap | None) -> str:
        """One problem as ``FILE[:LINE]: PATH: WHAT``."""
        if problem.path is None:
            return f"{self.file}: {problem.message}"
        line = lines.line(problem.path) if lines is not None else None
        where = f"{self.file}:{line}" if line is not None else self.file
        return f"{where}: {format_path(problem.path)}: {problem.message}"


def _line_of(problem: Problem, lines: LineMap) -> int:
    line = lines.line(problem.path) if problem.path is not None else None
    return 0 if line is None else line


def quote(text: str) -> str:
    """*text* in single quotes, backslashes as written (``repr`` doubles them)."""
    return f"'{text}'" if "'" not in text else repr(text)


class _UniqueKeyLoader(yaml.SafeLoader):  # type: ignore[misc]
    """A safe loader that rejects a key given twice in one mapping (YAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Hashable] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            if isinstance(key, Hashable):
                seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def read_spec_file(path: Path) -> tuple[Any, LineMap]:
    """Parse *path* as JSON (``.json``) or YAML (anything else).

    Raises :class:`SpecError` for a file that cannot be read or parsed, naming the line.
    """
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(file, [Problem(None, "spec file not found")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(file, [Problem(None, f"cannot read spec file: {exc}")]) from None
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text), LineMap(None)
        except json.JSONDecodeError as exc:
            raise SpecError(
                f"{file}:{exc.lineno}", [Problem(None, f"invalid JSON: {exc.msg}")]
            ) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{file}:{mark.line + 1}" if mark is not None else file
        raise SpecError(where, [Problem(None, f"invalid YAML: {exc.problem}")]) from None
    except yaml.YAMLError as exc:
        raise SpecError(file, [Problem(None, f"invalid YAML: {exc}")]) from None
    return data, LineMap(root)


def schema_problems(data: Any) -> list[Problem]:
    """Every way *data* breaks :data:`SPEC_SCHEMA`, as problems sorted by path."""
    validator = Draft202012Validator(SPEC_SCHEMA)
    problems: list[Problem] = []
    for error in validator.iter_errors(data):
        problems.extend(p for p in _translate(error) if p not in problems)
    return sorted(problems, key=lambda p: _sort_key(p.path or ()))


def _sort_key(path: PathT) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, p) if isinstance(p, int) else (1, p) for p in path)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int | float):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "a list",
    "object": "a mapping",
    "null": "null",
}


def _types(value: str | list[str]) -> str:
    names = [_TYPE_NAMES.get(t, t) for t in ([value] if isinstance(value, str) else value)]
    return " or ".join(names)


def suggest(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the choice closest to *word*, or ``""`` if none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _translate(error: ValidationError) -> list[Problem]:
    path: PathT = tuple(error.absolute_path)
    kind, value, instance = error.validator, error.validator_value, error.instance
    if kind in ("anyOf", "oneOf"):
        return _translate_choice(error, path)
    if kind == "additionalProperties" and isinstance(instance, dict):
        allowed = sorted(error.schema.get("properties", {}))
        if _in_processors(path):
            return [
                Problem(path, f"unknown processor {k!r}{suggest(str(k), allowed)}")
                for k in instance
                if k not in allowed
            ]
        return [
            Problem(
                (*path, key),
                f"unknown key{suggest(str(key), allowed)}; allowed keys: {', '.join(allowed)}",
            )
            for key in instance
            if key not in allowed
        ]
    if "propertyNames" in error.relative_schema_path:
        return [Problem((*path, str(instance)), _bad_name(path, str(instance)))]
    if kind == "required" and isinstance(instance, dict):
        return [Problem(path, f"missing required key {k!r}") for k in value if k not in instance]
    if kind == "type":
        return [Problem(path, f"expected {_types(value)}, got {_describe(instance)}")]
    if kind == "enum" and _in_processors(path):
        known = ", ".join(value)
        hint = suggest(str(instance), value)
        return [Problem(path, f"unknown processor {instance!r}{hint}; known: {known}")]
    if kind == "enum":
        choices = ", ".join(repr(v) for v in value)
        hint = suggest(instance, [str(v) for v in value]) if isinstance(instance, str) else ""
        return [Problem(path, f"got {_describe(instance)}{hint}; expected one of: {choices}")]
    if kind == "pattern" and path == ("name",):
        return [
            Problem(
                path,
                f"invalid spider name {instance!r}: use up to 200 letters, digits, "
                "'_', '.' or '-', starting with a letter or digit",
            )
        ]
    return [Problem(path, _simple_message(kind, value, instance))]


def _simple_message(kind: str, value: Any, instance: Any) -> str:
    if kind == "minimum":
        return f"must be >= {value}, got {instance!r}"
    if kind == "minLength":
        return "must not be empty"
    if kind in ("minItems", "minProperties"):
        unit = "item" if kind == "minItems" else "key"
        return f"must have at least {value} {unit}{'s' if value != 1 else ''}"
    if kind in ("maxItems", "maxProperties"):
        unit = "item" if kind == "maxItems" else "key"
        return f"must have at most {value} {unit}{'s' if value != 1 else ''}"
    if kind == "pattern":
        return f"{instance!r} does not match {value}"
    return f"{instance!r}: {kind} {value!r} not satisfied"


def _bad_name(path: PathT, name: str) -> str:
    if path == ("settings",):
        return "invalid setting name: Scrapy settings are UPPER_CASE"
    what = "item type" if path == ("items",) else "field"
    return f"invalid {what} name {name!r}: use letters, digits and '_', starting with a letter"


def _translate_choice(error: ValidationError, path: PathT) -> list[Problem]:
    """An anyOf/oneOf failure: explain the branch whose type fits, else the types expected."""
    context = list(error.context or [])
    wrong_type = {
        e.relative_schema_path[0]
        for e in context
        if e.validator == "type" and len(e.relative_schema_path) == 2
    }
    fitting = [e for e in context if e.relative_schema_path[0] not in wrong_type]
    best = best_match(fitting) if fitting else None
    if best is not None:
        return _translate(best)
    if _in_processors(path):
        names = "a processor name or a one-key mapping"
    else:
        branches = error.schema.get(str(error.validator), [])
        names = _types([b["type"] for b in branches if isinstance(b.get("type"), str)])
    return [Problem(path, f"expected {names}, got {_describe(error.instance)}")]


def _in_processors(path: PathT) -> bool:
    return len(path) >= 2 and path[-2] == "processors" and isinstance(path[-1], int)
