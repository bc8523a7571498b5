"""Spider specs: a spider written as a YAML or JSON file, loaded into typed dataclasses.

:func:`load_spec` reads a file, checks it against :data:`~crawlfleet.spiders.schema.SPEC_SCHEMA`
and then checks what a schema cannot say: selectors and regexes compile, names refer to
declared item types and fields, options do not contradict each other. Any problem raises
:class:`~crawlfleet.spiders.validation.SpecError` (a :class:`~crawlfleet.exceptions.ConfigError`)
whose message names the file, the path inside it and what is wrong. The format is
described in ``docs/spec.md``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cssselect import SelectorError
from parsel import Selector

from crawlfleet.settings.config import redact_url
from crawlfleet.spiders.schema import CONVERSIONS
from crawlfleet.spiders.validation import (
    LineMap,
    PathT,
    Problem,
    SpecError,
    quote,
    read_spec_file,
    schema_problems,
    suggest,
)
from crawlfleet.urls import check_http_url

__all__ = [
    "FieldSpec",
    "ItemSpec",
    "LinkRule",
    "Pagination",
    "ProcessorSpec",
    "Query",
    "RequestSpec",
    "Spec",
    "SpecError",
    "load_spec",
    "parse_spec",
]

logger = logging.getLogger(__name__)

#: Item keys crawlfleet adds; field names may not use them (all start with ``_`` or are url).
RESERVED_FIELDS = frozenset({"url"})

_EMPTY_DOC = Selector(text="<html><body></body></html>")


@dataclass(frozen=True)
class Query:
    """A CSS selector or an XPath expression (``kind`` says which)."""

    kind: Literal["css", "xpath"]
    expr: str


@dataclass(frozen=True)
class ProcessorSpec:
    """One processor step: its name and argument (``None`` when written as a bare name)."""

    name: str
    arg: Any = None


@dataclass(frozen=True)
class FieldSpec:
    """How one field's value is extracted. ``default`` applies only if ``has_default``."""

    name: str
    query: Query
    regex: str | None = None
    processors: tuple[ProcessorSpec, ...] = ()
    many: bool = False
    required: bool = False
    has_default: bool = False
    default: Any = None


@dataclass(frozen=True)
class ItemSpec:
    """An item type: either ``fields`` (with ``key`` and optional ``each``) or ``auto``.

    A page yields it only if ``match`` is ``None`` or selects something on the page.
    """

    name: str
    fields: tuple[FieldSpec, ...] = ()
    key: tuple[str, ...] = ()
    each: Query | None = None
    auto: str | None = None
    match: Query | None = None


@dataclass(frozen=True)
class LinkRule:
    """Links to follow; a page reached yields the first of ``item_types`` whose ``match``
    selects something on it (nothing when ``item_types`` is empty)."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    restrict_css: tuple[str, ...] = ()
    restrict_xpath: tuple[str, ...] = ()
    #: extensions of links skipped (None: Scrapy's default list), less allow_extensions
    deny_extensions: tuple[str, ...] | None = None
    allow_extensions: tuple[str, ...] = ()
    follow: bool = True
    item_types: tuple[str, ...] = ()
    max_depth: int | None = None


@dataclass(frozen=True)
class Pagination:
    """The next-page link; ``max_pages`` counts the first page (``None``: no limit)."""

    query: Query
    max_pages: int | None = None


@dataclass(frozen=True)
class RequestSpec:
    """What every request of the spider carries."""

    headers: Mapping[str, str] = field(default_factory=dict)
    cookies: bool = True
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Spec:
    """A validated spider spec. ``path`` is the file it came from (``None`` if built in code).

    ``start_item_types`` are what start pages yield, chosen like a link rule's.
    """

    name: str
    items: Mapping[str, ItemSpec]
    start_urls: tuple[str, ...] = ()
    allowed_domains: tuple[str, ...] = ()
    start_item_types: tuple[str, ...] = ()
    max_depth: int | None = None
    #: "follow", "item" or "ignore": see the schema's description
    meta_refresh: str = "follow"
    links: tuple[LinkRule, ...] = ()
    pagination: Pagination | None = None
    request: RequestSpec = field(default_factory=RequestSpec)
    settings: Mapping[str, Any] = field(default_factory=dict)
    path: Path | None = None


def load_spec(path: str | Path) -> Spec:
    """Read, validate and build the spec in *path* (YAML, or JSON for ``.json``).

    Raises :class:`SpecError` listing every problem found; nothing is half-loaded. An
    item type that nothing yields is only logged as a warning.
    """
    path = Path(path)
    data, lines = read_spec_file(path)
    return _validated(data, str(path), lines, path)


def parse_spec(data: Any, source: str = "<spec>") -> Spec:
    """Validate and build a spec from already-parsed *data*; *source* names it in errors."""
    return _validated(data, source, None, None)


def _validated(data: Any, source: str, lines: LineMap | None, path: Path | None) -> Spec:
    problems = schema_problems(data) or _semantic_problems(data)
    if problems:
        raise SpecError(source, problems, lines)
    spec = _build(data, path)
    for name in _unused_items(spec):
        logger.warning(
            "%s: items.%s: no link rule or start_item yields this item type", source, name
        )
    return spec


def _strings(value: str | list[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _extensions(value: str | list[str] | None) -> tuple[str, ...]:
    """Extensions as LinkExtractor takes them: lower case, without the dot."""
    return tuple(e.lower().lstrip(".") for e in _strings(value))


def _query(raw: Mapping[str, Any]) -> Query:
    if "css" in raw:
        return Query("css", raw["css"])
    return Query("xpath", raw["xpath"])


def _processor(raw: str | Mapping[str, Any]) -> ProcessorSpec:
    if isinstance(raw, str):
        return ProcessorSpec(raw)
    ((name, arg),) = raw.items()
    if name == "date" and isinstance(arg, str):
        arg = [arg]
    return ProcessorSpec(name, tuple(arg) if isinstance(arg, list) else arg)


def _build(data: Mapping[str, Any], path: Path | None) -> Spec:
    items: dict[str, ItemSpec] = {}
    for name, raw in data["items"].items():
        fields = tuple(
            FieldSpec(
                name=fname,
                query=_query(fraw),
                regex=fraw.get("re"),
                processors=tuple(_processor(p) for p in fraw.get("processors", ())),
                many=fraw.get("many", False),
                required=fraw.get("required", False),
                has_default="default" in fraw,
                default=fraw.get("default"),
            )
            for fname, fraw in raw.get("fields", {}).items()
        )
        each, match = raw.get("each"), raw.get("match")
        items[name] = ItemSpec(
            name=name,
            fields=fields,
            key=_strings(raw.get("key")),
            each=_query(each) if each is not None else None,
            auto=raw.get("auto"),
            match=_query(match) if match is not None else None,
        )
    links = tuple(
        LinkRule(
            allow=_strings(r.get("allow")),
            deny=_strings(r.get("deny")),
            restrict_css=_strings(r.get("restrict_css")),
            restrict_xpath=_strings(r.get("restrict_xpath")),
            deny_extensions=(_extensions(r["deny_extensions"]) if "deny_extensions" in r else None),
            allow_extensions=_extensions(r.get("allow_extensions")),
            follow=r.get("follow", "item" not in r),
            item_types=_strings(r.get("item")),
            max_depth=r.get("max_depth"),
        )
        for r in data.get("links", ())
    )
    pag = data.get("pagination")
    req = data.get("request", {})
    return Spec(
        name=data["name"],
        items=items,
        start_urls=tuple(data.get("start_urls", ())),
        allowed_domains=tuple(data.get("allowed_domains", ())),
        start_item_types=_strings(data.get("start_item")),
        max_depth=data.get("max_depth"),
        meta_refresh=data.get("meta_refresh", "follow"),
        links=links,
        pagination=Pagination(_query(pag), pag.get("max_pages")) if pag is not None else None,
        request=RequestSpec(
            headers=dict(req.get("headers", {})),
            cookies=req.get("cookies", True),
            meta=dict(req.get("meta", {})),
        ),
        settings=dict(data.get("settings", {})),
        path=path,
    )


def _unused_items(spec: Spec) -> list[str]:
    used = {name for rule in spec.links for name in rule.item_types}
    used.update(spec.start_item_types)
    return [name for name in spec.items if name not in used]


# -- checks a schema cannot express ------------------------------------------------------


def _semantic_problems(data: Mapping[str, Any]) -> list[Problem]:
    """Problems in a spec that already matches the schema."""
    out: list[Problem] = []
    items: Mapping[str, Any] = data["items"]
    for i, url in enumerate(data.get("start_urls", ())):
        try:
            check_http_url(url)
        except ValueError as exc:
            out.append(
                Problem(("start_urls", i), f"not an http(s) URL: {redact_url(url)!r} ({exc})")
            )
    for i, domain in enumerate(data.get("allowed_domains", ())):
        if "/" in domain or ":" in domain or " " in domain:
            out.append(
                Problem(
                    ("allowed_domains", i),
                    f"expected a domain name such as 'example.com', got {domain!r}",
                )
            )
    if "start_item" in data:
        out.extend(_item_types_problems(("start_item",), data["start_item"], items))
    for i, rule in enumerate(data.get("links", ())):
        out.extend(_rule_problems(("links", i), rule, items))
    if "pagination" in data:
        out.extend(_query_problems(("pagination",), data["pagination"]))
    for name, item in items.items():
        out.extend(_item_problems(("items", name), item))
    return out


def _item_types_problems(
    path: PathT, raw: str | list[str], items: Mapping[str, Any]
) -> list[Problem]:
    """Problems of an ``item`` / ``start_item`` value: one name or a list tried in order."""
    if isinstance(raw, str):
        return [] if raw in items else [_unknown_item(path, raw, items)]
    out: list[Problem] = []
    for j, name in enumerate(raw):
        where = (*path, j)
        if name not in items:
            out.append(_unknown_item(where, name, items))
        elif name in raw[:j]:
            out.append(Problem(where, f"item type {name!r} is listed twice"))
        elif j < len(raw) - 1 and "match" not in items[name]:
            later = ", ".join(repr(n) for n in raw[j + 1 :])
            out.append(
                Problem(
                    where,
                    f"item type {name!r} has no 'match', so it takes every page and "
                    f"{later} after it would never be tried: give it a 'match' or list it last",
                )
            )
    return out


def _unknown_item(path: PathT, name: str, items: Mapping[str, Any]) -> Problem:
    declared = ", ".join(sorted(items)) or "none"
    hint = suggest(name, items)
    return Problem(path, f"unknown item type {name!r}{hint}; declared: {declared}")


def _rule_problems(path: PathT, rule: Mapping[str, Any], items: Mapping[str, Any]) -> list[Problem]:
    out: list[Problem] = []
    for key in ("allow", "deny"):
        out.extend(_regex_list_problems((*path, key), rule.get(key)))
    for key, kind in (("restrict_css", "css"), ("restrict_xpath", "xpath")):
        raw = rule.get(key)
        if isinstance(raw, str):
            out.extend(_selector_problem((*path, key), kind, raw))
        elif raw is not None:
            for j, expr in enumerate(raw):
                out.extend(_selector_problem((*path, key, j), kind, expr))
    if "item" in rule:
        out.extend(_item_types_problems((*path, "item"), rule["item"], items))
    return out


def _regex_list_problems(path: PathT, raw: str | list[str] | None) -> list[Problem]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return _regex_problem(path, raw)
    out: list[Problem] = []
    for j, pattern in enumerate(raw):
        out.extend(_regex_problem((*path, j), pattern))
    return out


def _regex_problem(path: PathT, pattern: str) -> list[Problem]:
    try:
        re.compile(pattern)
    except re.error as exc:
        return [Problem(path, f"invalid regex {quote(pattern)}: {exc}")]
    return []


def _selector_problem(path: PathT, kind: str, expr: str) -> list[Problem]:
    try:
        if kind == "css":
            _EMPTY_DOC.css(expr)
        else:
            _EMPTY_DOC.xpath(expr)
    except (SelectorError, ValueError) as exc:
        what = "CSS selector" if kind == "css" else "XPath"
        reason = str(exc).removeprefix("XPath error: ")
        return [Problem(path, f"invalid {what} {quote(expr)}: {reason}")]
    return []


def _query_problems(path: PathT, raw: Mapping[str, Any]) -> list[Problem]:
    kinds = [k for k in ("css", "xpath") if k in raw]
    if len(kinds) != 1:
        found = "both" if kinds else "neither"
        return [Problem(path, f"needs exactly one of 'css' or 'xpath', found {found}")]
    return _selector_problem((*path, kinds[0]), kinds[0], raw[kinds[0]])


def _item_problems(path: PathT, item: Mapping[str, Any]) -> list[Problem]:
    out: list[Problem] = []
    fields: Mapping[str, Any] = item.get("fields", {})
    if "match" in item:
        out.extend(_query_problems((*path, "match"), item["match"]))
    if "auto" in item:
        for key in ("fields", "key", "each"):
            if key in item:
                out.append(
                    Problem(
                        (*path, key),
                        f"not allowed with 'auto: {item['auto']}' (the page is extracted "
                        "by the text-extraction pipeline)",
                    )
                )
        return out
    if not fields:
        out.append(Problem(path, "needs 'fields' (or 'auto: article')"))
    if "each" in item:
        out.extend(_query_problems((*path, "each"), item["each"]))
        if "key" not in item:
            out.append(
                Problem(
                    (*path, "key"),
                    "required with 'each': the items of one page would share the page URL",
                )
            )
    for j, key in enumerate(_strings(item.get("key"))):
        key_path = (*path, "key", j) if isinstance(item["key"], list) else (*path, "key")
        if key not in fields:
            declared = ", ".join(fields) or "none"
            out.append(Problem(key_path, f"unknown field {key!r}; declared: {declared}"))
    for name, raw in fields.items():
        out.extend(_field_problems((*path, "fields", name), name, raw))
    return out


def _field_problems(path: PathT, name: str, raw: Mapping[str, Any]) -> list[Problem]:
    out: list[Problem] = []
    if name in RESERVED_FIELDS:
        out.append(Problem(path, f"field name {name!r} is reserved (every item has it)"))
    out.extend(_query_problems(path, raw))
    if "re" in raw:
        out.extend(_regex_problem((*path, "re"), raw["re"]))
    if raw.get("required") and "default" in raw:
        out.append(
            Problem(
                (*path, "default"), "a required field cannot have a default (it is never empty)"
            )
        )
    procs = raw.get("processors", ())
    for j, proc in enumerate(procs):
        ppath = (*path, "processors", j)
        pname = proc if isinstance(proc, str) else next(iter(proc))
        if pname in CONVERSIONS and j != len(procs) - 1:
            out.append(
                Problem(ppath, f"{pname!r} converts the value and must be the last processor")
            )
        if pname == "replace" and isinstance(proc, dict):
            out.extend(_regex_problem((*ppath, "replace", 0), proc["replace"][0]))
    return out
