"""Applying a spec to one page: which item type it yields, its items, the links to follow.

This is the whole behaviour of a spec spider, free of Scrapy's engine, so that
:class:`~crawlfleet.spiders.config_spider.SpecSpider` and ``crawlfleet extract`` share it.

A page's *role* says what it may yield and how far it is from the start:

- a request the spider made carries its role in ``meta`` (:data:`SPEC_ITEM_META`,
  :data:`SPEC_FOLLOW_META`, :data:`SPEC_DEPTH_META`, :data:`SPEC_PAGE_META`);
- a page without it (a seed from the shared frontier, a URL given to ``extract``) takes
  the item types of the first link rule with an ``item`` that accepts its URL, else the
  spec's ``start_item``, at depth 0.

A role lists item types in order; the page yields the first whose ``match`` selects
something on it (a type without ``match`` always does), or nothing.

Items are plain dicts: ``_type``, ``url``, ``_key``, the declared fields in order, then
``_errors`` (what makes the item invalid: an empty required field) and ``_warnings``
(notes that do not, such as a value a conversion could not read or an empty key field),
each a list of ``"field: problem"`` strings present only when non-empty. Auto-article
items carry ``_auto`` and the page under ``_html`` instead of fields.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import urldefrag, urlsplit

from parsel import Selector, SelectorList
from scrapy.http import TextResponse
from scrapy.linkextractors import IGNORED_EXTENSIONS, LinkExtractor

from crawlfleet.meta import SPEC_DEPTH_META, SPEC_FOLLOW_META, SPEC_ITEM_META, SPEC_PAGE_META
from crawlfleet.spiders.processors import ProcessorContext, apply_processors
from crawlfleet.spiders.spec import FieldSpec, ItemSpec, LinkRule, Query, Spec

__all__ = [
    "AUTO_FIELD",
    "ENCODING_FIELD",
    "ERRORS_FIELD",
    "HTML_FIELD",
    "KEY_FIELD",
    "SPEC_DEPTH_META",
    "SPEC_FOLLOW_META",
    "SPEC_ITEM_META",
    "SPEC_PAGE_META",
    "TYPE_FIELD",
    "WARNINGS_FIELD",
    "FollowLink",
    "PageResult",
    "PageRole",
    "SpecExtractor",
]

TYPE_FIELD = "_type"  #: the item type's name
KEY_FIELD = "_key"  #: the item's identity (a string) for upserts, with ``_type``
ERRORS_FIELD = "_errors"  #: problems that make the item invalid; present only when non-empty
WARNINGS_FIELD = "_warnings"  #: problems that do not; present only when non-empty
HTML_FIELD = "_html"  #: auto items: the page's decoded HTML
AUTO_FIELD = "_auto"  #: auto items: the extraction wanted (``"article"``)
ENCODING_FIELD = "_encoding"  #: auto items: the encoding the page was decoded with


def skipped_extensions(rule: LinkRule) -> list[str]:
    """The extensions whose links *rule* skips: its ``deny_extensions`` (Scrapy's list
    when not given) less its ``allow_extensions``."""
    base = IGNORED_EXTENSIONS if rule.deny_extensions is None else rule.deny_extensions
    return [e for e in base if e not in rule.allow_extensions]


@dataclass(frozen=True)
class PageRole:
    """What a page may yield, whether link rules apply to it, and where it is.

    ``item_types``: the item types tried in order (the first whose ``match`` selects
    something is yielded); empty: the page yields nothing.
    """

    item_types: tuple[str, ...] = ()
    follow: bool = True
    depth: int = 0
    page: int = 1

    @property
    def item(self) -> str | None:
        """``item_types`` as one string, as ``crawlfleet extract`` shows it: ``None``,
        ``"book"``, or ``"product|article"`` for several."""
        return "|".join(self.item_types) or None

    def meta(self) -> dict[str, Any]:
        """The request meta that gives the fetched page this role (plain JSON values):
        :data:`SPEC_ITEM_META` is ``None``, a name, or a list for several types."""
        types = self.item_types
        item: str | list[str] | None = None
        if len(types) == 1:
            item = types[0]
        elif types:
            item = list(types)
        return {
            SPEC_ITEM_META: item,
            SPEC_FOLLOW_META: self.follow,
            SPEC_DEPTH_META: self.depth,
            SPEC_PAGE_META: self.page,
        }


@dataclass(frozen=True)
class FollowLink:
    """A URL to request; ``rule`` is the link rule's index (``None`` for pagination)."""

    url: str
    kind: Literal["link", "next"]
    role: PageRole
    rule: int | None = None
    text: str = ""


@dataclass
class PageResult:
    """Everything a spec gets from one page.

    ``item_type`` is the type the page yielded (``None``: none); ``unmatched`` is set when
    the role has item types but none of their ``match`` selectors found anything (the
    page then yields no item). ``warnings`` are problems for the log.
    """

    url: str
    role: PageRole
    item_type: str | None = None
    items: list[dict[str, Any]] = field(default_factory=list)
    links: list[FollowLink] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unmatched: bool = False


class SpecExtractor:
    """A spec made ready to apply to pages: link extractors built once.

    With ``allowed_domains``, only links to those hosts (or their sub-domains) are
    followed and only URLs on them are placed by link rules; ``check_domains=False``
    ignores the list (for a saved file whose URL is a ``file://`` path).
    """

    def __init__(self, spec: Spec, *, check_domains: bool = True) -> None:
        self.spec = spec
        self.check_domains = check_domains
        self._domains = tuple(d.lower() for d in spec.allowed_domains) if check_domains else ()
        # Domains are checked here, by host name: LinkExtractor's check includes the port.
        self._extractors = [
            LinkExtractor(
                allow=rule.allow,
                deny=rule.deny,
                restrict_css=rule.restrict_css,
                restrict_xpaths=rule.restrict_xpath,
                deny_extensions=skipped_extensions(rule),
                unique=True,
            )
            for rule in spec.links
        ]

    # -- roles ------------------------------------------------------------------------

    def role_for(self, url: str, meta: Mapping[str, Any] | None = None) -> PageRole:
        """The role of the page at *url* fetched with *meta* (see the module docstring)."""
        meta = meta or {}
        if SPEC_ITEM_META in meta:
            return PageRole(
                item_types=self._known_types(meta[SPEC_ITEM_META]),
                follow=bool(meta.get(SPEC_FOLLOW_META, True)),
                depth=int(meta.get(SPEC_DEPTH_META, 0)),
                page=int(meta.get(SPEC_PAGE_META, 1)),
            )
        index = self.matching_rule(url)
        if index is not None:
            rule = self.spec.links[index]
            return PageRole(item_types=rule.item_types, follow=rule.follow)
        return self.start_role()

    def _known_types(self, raw: Any) -> tuple[str, ...]:
        # A request made under another version of the spec may name types that are gone.
        names = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
        return tuple(n for n in names if isinstance(n, str) and n in self.spec.items)

    def matching_rule(self, url: str) -> int | None:
        """Index of the first link rule with an ``item`` whose allow/deny accept *url*."""
        if not self.on_domains(url):
            return None
        for index, (rule, extractor) in enumerate(
            zip(self.spec.links, self._extractors, strict=True)
        ):
            if rule.item_types and extractor.matches(url):
                return index
        return None

    def on_domains(self, url: str) -> bool:
        """Whether *url*'s host is one of ``allowed_domains`` or under one (or none is set)."""
        if not self._domains:
            return True
        host = (urlsplit(url).hostname or "").lower()
        return any(host == d or host.endswith(f".{d}") for d in self._domains)

    def start_role(self) -> PageRole:
        """The role of a start URL."""
        return PageRole(item_types=self.spec.start_item_types)

    # -- the whole page ---------------------------------------------------------------

    def process(
        self, response: TextResponse, role: PageRole | None = None, *, item: str | None = None
    ) -> PageResult:
        """Items and links of *response*; *item* forces the item type (``extract --item``)."""
        if role is None:
            role = self.role_for(response.url, response.meta if _has_meta(response) else None)
        if item is not None:
            role = replace(role, item_types=(item,))
        result = PageResult(url=response.url, role=role)
        if role.item_types:
            item_spec = self.item_type_for(response, role.item_types)
            if item_spec is None:
                result.unmatched = True
            else:
                result.item_type = item_spec.name
                result.items, result.warnings = self.items(response, item_spec)
        result.links = self.links(response, role)
        return result

    def item_type_for(self, response: TextResponse, names: tuple[str, ...]) -> ItemSpec | None:
        """The first of the item types *names* whose ``match`` selects something on
        *response* (a type without ``match`` always does), or ``None``."""
        for name in names:
            item = self.spec.items[name]
            if item.match is None or _select(response.selector, item.match):
                return item
        return None

    # -- items ------------------------------------------------------------------------

    def items(
        self, response: TextResponse, item: ItemSpec
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """The items of type *item* on *response*, and log lines about their problems.

        ``item.match`` is not checked here (:meth:`process` does).
        """
        url = response.url
        if item.auto is not None:
            return [
                {
                    TYPE_FIELD: item.name,
                    "url": url,
                    KEY_FIELD: url,
                    AUTO_FIELD: item.auto,
                    HTML_FIELD: response.text,
                    ENCODING_FIELD: response.encoding,
                }
            ], []
        context = ProcessorContext(response.urljoin)
        roots: list[Selector] | SelectorList[Selector]
        roots = [response.selector] if item.each is None else _select(response.selector, item.each)
        if item.each is not None and not roots:
            return [], [f"{url}: no {item.name!r} items: 'each' matched nothing"]
        out: list[dict[str, Any]] = []
        log: list[str] = []
        for root in roots:
            record, errors, warnings = _extract_one(root, item, url, context)
            if errors:
                record[ERRORS_FIELD] = errors
            if warnings:
                record[WARNINGS_FIELD] = warnings
            if errors or warnings:
                problems = "; ".join(errors + warnings)
                log.append(f"{url}: {item.name} item {record[KEY_FIELD]!r}: {problems}")
            out.append(record)
        return out, log

    # -- links ------------------------------------------------------------------------

    def links(self, response: TextResponse, role: PageRole) -> list[FollowLink]:
        """The requests *response* leads to: link rules (if ``role.follow``), then next pages.

        URLs lose their ``#fragment``. A next page is never also a rule's link, and a link
        matched by several rules goes with the first. Links deeper than the spec's or the
        rule's ``max_depth`` are left out, and so are pages past ``max_pages``.
        Pagination applies whatever ``role.follow`` says.
        """
        pagination = self.spec.pagination
        next_links: list[FollowLink] = []
        if pagination is not None and (
            pagination.max_pages is None or role.page < pagination.max_pages
        ):
            target = replace(role, page=role.page + 1)
            next_links = [
                FollowLink(url, "next", target)
                for url in self._next_urls(response, pagination.query)
            ]
        seen = {link.url for link in next_links}
        out: list[FollowLink] = []
        depth = role.depth + 1
        if role.follow and (self.spec.max_depth is None or depth <= self.spec.max_depth):
            for index, (rule, extractor) in enumerate(
                zip(self.spec.links, self._extractors, strict=True)
            ):
                if rule.max_depth is not None and depth > rule.max_depth:
                    continue
                target = PageRole(rule.item_types, follow=rule.follow, depth=depth)
                for link in extractor.extract_links(response):
                    url = urldefrag(link.url).url
                    if url not in seen and self.on_domains(url):
                        seen.add(url)
                        out.append(FollowLink(url, "link", target, index, link.text))
        return out + next_links

    def _next_urls(self, response: TextResponse, query: Query) -> list[str]:
        urls: list[str] = []
        for node in _select(response.selector, query):
            raw = node.root if isinstance(node.root, str) else node.attrib.get("href")
            if not raw or not str(raw).strip():
                continue
            url = urldefrag(response.urljoin(str(raw).strip())).url
            if not url.startswith(("http://", "https://", "file://")):
                continue
            if url not in urls and self.on_domains(url):
                urls.append(url)
        return urls


def _has_meta(response: TextResponse) -> bool:
    try:
        response.meta  # noqa: B018 - raises without a request
    except AttributeError:
        return False
    return True


def _select(root: Selector, query: Query) -> SelectorList[Selector]:
    return root.css(query.expr) if query.kind == "css" else root.xpath(query.expr)


def _extract_one(
    root: Selector, item: ItemSpec, url: str, context: ProcessorContext
) -> tuple[dict[str, Any], list[str], list[str]]:
    """The record of one item, its errors (it is invalid) and its warnings."""
    values: dict[str, Any] = {}
    errors: list[str] = []
    warnings: list[str] = []
    for spec in item.fields:
        value, problems = _field_value(root, spec, context)
        warnings.extend(f"{spec.name}: {p}" for p in problems)
        if _is_empty(value):
            if spec.required:
                errors.append(f"{spec.name}: required field is empty")
            if spec.has_default:
                value = spec.default
        values[spec.name] = value
    key = url
    if item.key:
        parts = [values[name] for name in item.key]
        empty = [name for name, v in zip(item.key, parts, strict=True) if _is_empty(v)]
        if empty:
            warnings.append(f"{', '.join(empty)}: key field is empty; the page URL is the key")
        elif len(parts) == 1 and not isinstance(parts[0], list | dict):
            key = str(parts[0])
        else:
            key = json.dumps(parts, default=str, ensure_ascii=False)
    record: dict[str, Any] = {TYPE_FIELD: item.name, "url": url, KEY_FIELD: key}
    record.update(values)
    return record, errors, warnings


def _field_value(
    root: Selector, spec: FieldSpec, context: ProcessorContext
) -> tuple[Any, list[str]]:
    selected = _select(root, spec.query)
    raw: list[str] = selected.re(spec.regex) if spec.regex is not None else selected.getall()
    values, problems = apply_processors(raw, spec.processors, context)
    if spec.many:
        return values, problems
    return (values[0] if values else None), problems


def _is_empty(value: Any) -> bool:
    return value is None or value == "" or value == []
