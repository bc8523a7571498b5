"""``crawlfleet extract SPEC URL|FILE``: what a spec gets from one page, without crawling.

Fetches the URL (``http://`` or ``https://``; no proxy) or reads a saved HTML file,
applies the spec and prints the page's role (item type, depth), its items and the
links the spider would request. A saved file has a ``file://`` URL unless ``--url``
says where it came from; without ``--url`` its links are not checked against
``allowed_domains``. ``--item`` forces the item type.

Output is a readable listing, or with ``--json`` one JSON object::

    {"url": str, "role": {"item": str|null, "follow": bool, "depth": int, "page": int},
     "matched_rule": int|null, "unmatched": bool,
     "items": [{...}], "links": [{"url", "kind", "rule", "item", "follow", "depth",
     "page"}], "warnings": [str]}

Decimals are written as strings, dates in ISO 8601. Exit status: 0 when the page was
processed (warnings included), 1 when the spec is invalid or the page cannot be had.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import urllib.error
import urllib.request
from decimal import Decimal
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from scrapy.http import Headers, TextResponse
from scrapy.responsetypes import responsetypes

from crawlfleet.exceptions import ConfigError
from crawlfleet.spiders.extraction import (
    ERRORS_FIELD,
    HTML_FIELD,
    FollowLink,
    PageResult,
    SpecExtractor,
)
from crawlfleet.spiders.spec import Spec, load_spec

__all__ = ["HELP", "NAME", "add_arguments", "fetch", "run"]

NAME = "extract"
HELP = "Apply a spider spec to one page (URL or saved file); print its items and links."

_HTML_PREVIEW = 120


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", type=Path, metavar="SPEC", help="spec file (YAML or JSON)")
    parser.add_argument("target", metavar="URL|FILE", help="page URL or saved HTML file")
    parser.add_argument("--url", help="the URL a saved FILE was fetched from")
    parser.add_argument("--item", metavar="TYPE", help="extract this item type")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to fetch a URL (default: 30)"
    )


def run(args: argparse.Namespace) -> int:
    try:
        spec = load_spec(args.spec)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    if args.item is not None and args.item not in spec.items:
        declared = ", ".join(spec.items)
        print(f"--item: unknown item type {args.item!r}; declared: {declared}", file=sys.stderr)
        return 1
    target: str = args.target
    try:
        if target.startswith(("http://", "https://")):
            response = fetch(target, spec, timeout=args.timeout)
        else:
            response = read_file(Path(target), args.url)
    except (OSError, ValueError) as exc:
        print(f"{target}: {exc}", file=sys.stderr)
        return 1
    from_file = not target.startswith(("http://", "https://"))
    extractor = SpecExtractor(spec, check_domains=not (from_file and args.url is None))
    result = extractor.process(response, extractor.role_for(response.url), item=args.item)
    matched = extractor.matching_rule(response.url) if args.item is None else None
    if not extractor.on_domains(response.url):
        result.warnings.insert(0, f"{response.url}: outside allowed_domains")
    if args.json:
        print(json.dumps(_as_json(result, matched), default=_json_default, ensure_ascii=False))
    else:
        _print_listing(Console(soft_wrap=True, highlight=False), result, matched)
    return 0


def fetch(url: str, spec: Spec, *, timeout: float) -> TextResponse:
    """GET *url* with the spec's headers (no proxy, redirects followed).

    Raises ``OSError`` for a network failure or an HTTP error status, ``ValueError``
    for a response that is not text.
    """
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    headers = {"User-Agent": "crawlfleet-extract", **spec.request.headers}
    request = urllib.request.Request(url, headers=headers)
    try:
        with opener.open(request, timeout=timeout) as raw:
            body = raw.read()
            final_url = raw.geturl()
            header_items = list(raw.headers.items())
    except urllib.error.HTTPError as exc:
        raise OSError(f"HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise OSError(f"cannot fetch: {exc.reason}") from None
    return _text_response(final_url, body, Headers(header_items))


def read_file(path: Path, url: str | None) -> TextResponse:
    """A response for the saved page *path*, as if fetched from *url* (default its file URL)."""
    body = path.read_bytes()
    return _text_response(url or path.resolve().as_uri(), body, Headers({}))


def _text_response(url: str, body: bytes, headers: Headers) -> TextResponse:
    cls = responsetypes.from_args(headers=headers, url=url, body=body)
    if not issubclass(cls, TextResponse):
        raise ValueError(f"not a text page ({cls.__name__})")
    return cls(url=url, body=body, headers=headers)


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    return str(value)


def _link_json(link: FollowLink) -> dict[str, Any]:
    return {
        "url": link.url,
        "kind": link.kind,
        "rule": link.rule,
        "item": link.role.item,
        "follow": link.role.follow,
        "depth": link.role.depth,
        "page": link.role.page,
    }


def _as_json(result: PageResult, matched: int | None) -> dict[str, Any]:
    role = result.role
    return {
        "url": result.url,
        "role": {"item": role.item, "follow": role.follow, "depth": role.depth, "page": role.page},
        "matched_rule": matched,
        "unmatched": result.unmatched,
        "items": result.items,
        "links": [_link_json(link) for link in result.links],
        "warnings": result.warnings,
    }


def _show(value: Any) -> str:
    """A field value for people: strings quoted, converted values with their type."""
    if isinstance(value, Decimal):
        return f"{value} (decimal)"
    if isinstance(value, dt.datetime):
        return f"{value.isoformat()} (datetime)"
    if isinstance(value, dt.date):
        return f"{value.isoformat()} (date)"
    return json.dumps(value, default=_json_default, ensure_ascii=False)


def _print_listing(console: Console, result: PageResult, matched: int | None) -> None:
    role = result.role
    console.print(f"[bold]page[/bold]   {escape(result.url)}")
    if role.item is None:
        what = "no item type (links only)"
    else:
        source = f"link rule links[{matched}]" if matched is not None else "start_item / --item"
        what = f"item type [bold]{escape(role.item)}[/bold] ({source})"
    console.print(f"[bold]role[/bold]   {what}; depth {role.depth}, page {role.page}")
    if result.unmatched:
        console.print(
            f"[yellow]no items: items.{escape(str(role.item))}.match selects nothing here[/yellow]"
        )
    for number, item in enumerate(result.items, 1):
        console.print(
            f"\n[bold]item {number}[/bold]  {escape(str(item['_type']))}  "
            f"key={escape(str(item['_key']))}"
        )
        for name, value in item.items():
            if name in ("_type", "_key", "url", ERRORS_FIELD):
                continue
            shown = _show(value)
            if name == HTML_FIELD and len(value) > _HTML_PREVIEW:
                shown = _show(value[:_HTML_PREVIEW]) + f" ... ({len(value)} characters)"
            console.print(f"  {escape(name):<14} {escape(shown)}")
        for error in item.get(ERRORS_FIELD, ()):
            console.print(f"  [red]! {escape(error)}[/red]")
    console.print(f"\n[bold]links[/bold]  {len(result.links)}")
    for link in result.links:
        if link.kind == "next":
            detail = f"next page {link.role.page}"
        else:
            target = link.role.item or "no item"
            detail = f"links[{link.rule}] -> {target}, depth {link.role.depth}"
        console.print(f"  {escape(link.url)}  [dim]{escape(detail)}[/dim]")
    for warning in result.warnings:
        console.print(f"[yellow]warning: {escape(warning)}[/yellow]")
