"""Clean stage: tidy the text of every item field.

For each string in a public field (inside lists and dicts too):

- ``<script>``/``<style>`` blocks, HTML comments and leftover tags of known HTML elements
  are removed (block elements such as ``<p>``/``<br>`` become line breaks);
- HTML entities are unescaped (only complete ones ending in ``;``, so ``?a=1&copy=2``
  stays as it is);
- the text is put in Unicode NFC form, control and invisible characters are removed
  (line breaks and tabs become plain whitespace), Unicode spaces become ``" "``;
- whitespace is folded: into one line, or, for the fields listed in
  ``CRAWLFLEET_CLEAN_MULTILINE_FIELDS``, into lines and paragraphs (single blank lines).

Values that look like URLs only lose surrounding whitespace and control characters.
Fields whose names start with ``_`` (``_html``, ``_errors``, ``_type``, ``_key`` ...) and
non-string values (numbers, booleans) are left alone. Empty values are then removed
(``CRAWLFLEET_CLEAN_DROP_EMPTY``) and per-field defaults given
(``CRAWLFLEET_CLEAN_DEFAULTS``).
"""

from __future__ import annotations

import copy
import html
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any, Self

from itemadapter import ItemAdapter
from scrapy import Spider
from scrapy.crawler import Crawler

from crawlfleet.pipelines._util import is_empty, is_internal, map_strings, set_field
from crawlfleet.settings.access import get_bool, get_dict, get_str_list

__all__ = ["CleanPipeline", "clean_text"]

# fmt: off
_BLOCK_TAGS = frozenset({
    "address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt",
    "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
    "hr", "li", "main", "nav", "ol", "p", "pre", "section", "table", "tbody", "td", "tfoot",
    "th", "thead", "tr", "ul",
})
_INLINE_TAGS = frozenset({
    "a", "abbr", "area", "audio", "b", "base", "bdi", "bdo", "big", "body", "button",
    "canvas", "caption", "center", "cite", "code", "col", "colgroup", "data", "del",
    "details", "dfn", "dialog", "em", "embed", "fieldset", "font", "head", "html", "i",
    "iframe", "img", "input", "ins", "kbd", "label", "legend", "link", "map", "mark", "meta",
    "meter", "noscript", "object", "optgroup", "option", "output", "param", "picture",
    "progress", "q", "s", "samp", "select", "slot", "small", "source", "span", "strike",
    "strong", "sub", "summary", "sup", "svg", "template", "textarea", "time", "title",
    "track", "tt", "u", "var", "video", "wbr",
})
# fmt: on
_TAG_RE = re.compile(r"</?([A-Za-z][A-Za-z0-9]*)(?:\s[^<>]*)?/?>")
_DROP_BLOCK_RE = re.compile(r"<(script|style)\b[^>]*>.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_COMMENT_RE = re.compile(r"<!--.*?-->", re.DOTALL)
_ENTITY_RE = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
# Line separators other than "\n": CR, VT, FF, NEL, LINE/PARAGRAPH SEPARATOR.
_NEWLINES_RE = re.compile(r"\r\n?|[\x0b\x0c\x85\u2028\u2029]")
_SPACES_RE = re.compile(r"[ \t\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]+")
# Control characters (but "\n" and "\t"), lone surrogates and invisible characters that
# only get in the way in stored text (ZWJ/ZWNJ are kept: they change how Persian, Indic
# scripts and emoji are written).
_CONTROLS_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u200b\u2060\ufeff\ud800-\udfff]+")
_URL_RE = re.compile(r"^\s*(?:https?|ftp)://\S+\s*$", re.IGNORECASE)


def _strip_tag(match: re.Match[str]) -> str:
    name = match.group(1).lower()
    if name in _BLOCK_TAGS:
        return "\n"
    if name in _INLINE_TAGS:
        return ""
    return match.group(0)  # not HTML: "a <b and c> d" or "<Foo>" stay as written


def _drop_controls(text: str) -> str:
    """Remove control and invisible characters, keeping "\\n" and "\\t"."""
    return _CONTROLS_RE.sub("", text)


def _is_plain(text: str) -> bool:
    """Printable ASCII without markup or entities: no whitespace but spaces, already NFC."""
    return text.isascii() and text.isprintable() and "<" not in text and "&" not in text


def clean_text(text: str, *, multiline: bool = False) -> str:
    """Return *text* cleaned as described in the module docstring.

    *multiline* keeps line breaks (one blank line at most between paragraphs); otherwise
    all whitespace runs become a single space. The result has no surrounding whitespace.
    """
    if _is_plain(text):
        # nothing to strip, unescape, normalise or drop: only spaces to fold (the same
        # result as below, which costs several regex passes per string)
        return " ".join(text.split())
    if _URL_RE.match(text):
        return _drop_controls(text).strip()
    if "<" in text:
        text = _DROP_BLOCK_RE.sub("\n", text)
        text = _COMMENT_RE.sub("", text)
        text = _TAG_RE.sub(_strip_tag, text)
    if "&" in text:
        text = _ENTITY_RE.sub(lambda m: html.unescape(m.group(0)), text)
    text = unicodedata.normalize("NFC", text)
    text = _NEWLINES_RE.sub("\n", text)
    text = _drop_controls(text)
    if not multiline:
        return " ".join(text.split())
    lines = [_SPACES_RE.sub(" ", line).strip() for line in text.split("\n")]
    paragraphs: list[str] = []
    blank = False
    for line in lines:
        if line:
            if blank and paragraphs:
                paragraphs.append("")
            paragraphs.append(line)
            blank = False
        else:
            blank = True
    return "\n".join(paragraphs)


def _prune(value: Any) -> Any:
    """Remove empty strings/None/empty containers from inside lists and dicts."""
    if isinstance(value, list):
        return [_prune(v) for v in value if not is_empty(v)]
    if isinstance(value, Mapping):
        return {k: _prune(v) for k, v in value.items() if not is_empty(v)}
    return value


class CleanPipeline:
    """Item pipeline of the clean stage (see the module docstring).

    *defaults* maps a field name to the value given when that field is missing or empty;
    fields a Scrapy ``Item`` class does not declare are skipped.
    """

    def __init__(
        self,
        *,
        drop_empty: bool = True,
        defaults: Mapping[str, Any] | None = None,
        multiline_fields: Iterable[str] = ("text", "content", "body", "description"),
    ) -> None:
        self.drop_empty = drop_empty
        self.defaults = dict(defaults or {})
        self.multiline_fields = frozenset(multiline_fields)
        for name in self.defaults:
            if is_internal(name):
                raise ValueError(f"clean defaults may not name internal field {name!r}")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Build from ``CRAWLFLEET_CLEAN_*`` settings."""
        settings = crawler.settings
        return cls(
            drop_empty=get_bool(settings, "CRAWLFLEET_CLEAN_DROP_EMPTY"),
            defaults=get_dict(settings, "CRAWLFLEET_CLEAN_DEFAULTS"),
            multiline_fields=get_str_list(settings, "CRAWLFLEET_CLEAN_MULTILINE_FIELDS"),
        )

    def clean_value(self, field: str, value: Any) -> Any:
        """The cleaned *value* of *field* (empty parts pruned when dropping empties)."""
        multiline = field in self.multiline_fields
        cleaned = map_strings(value, lambda s: clean_text(s, multiline=multiline))
        return _prune(cleaned) if self.drop_empty else cleaned

    def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        """Clean *item* in place and return it."""
        adapter = ItemAdapter(item)
        for field in list(adapter.keys()):
            if is_internal(field):
                continue
            value = self.clean_value(field, adapter[field])
            if self.drop_empty and is_empty(value):
                del adapter[field]
            else:
                adapter[field] = value
        for field, default in self.defaults.items():
            if is_empty(adapter.get(field)):
                set_field(adapter, field, copy.deepcopy(default))
        return item
