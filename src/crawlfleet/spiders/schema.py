"""The JSON Schema of a spider spec: its shape, key by key.

:data:`SPEC_SCHEMA` is the single source of the spec's structure. ``load_spec`` checks a
spec against it first, then runs the checks a schema cannot express (selectors compile,
regexes compile, names refer to declared things). The published copy in
``docs/spec.schema.json`` is generated from it, so editors can validate specs as well::

    python -m crawlfleet.spiders.schema docs/spec.schema.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "ARG_PROCESSORS",
    "BARE_PROCESSORS",
    "CONVERSIONS",
    "SPEC_SCHEMA",
    "SPEC_VERSION",
    "schema_json",
]

#: The spec format version this code reads.
SPEC_VERSION = 1

#: Processors that convert text to another type; a conversion must be the last processor.
CONVERSIONS = ("int", "float", "decimal", "date")

#: Processors usable as a bare name (``- strip``).
BARE_PROCESSORS = (
    "strip",
    "normalize_space",
    "lower",
    "upper",
    "join",
    "absolute_url",
    *CONVERSIONS,
)

#: Processors written as a one-key mapping with an argument (``- join: ", "``).
ARG_PROCESSORS = ("strip", "join", "replace", "date")

_NAME = r"^[A-Za-z][A-Za-z0-9_]*$"

_STRINGS: dict[str, Any] = {
    "description": "One string or a list of strings.",
    "anyOf": [
        {"type": "string"},
        {"type": "array", "items": {"type": "string"}},
    ],
}

_EXTENSIONS: dict[str, Any] = {
    "description": "File extensions (without the dot, or with it), one or a list.",
    "anyOf": [
        {"type": "string", "pattern": "^\\.?[A-Za-z0-9_+-]+$"},
        {
            "type": "array",
            "items": {"type": "string", "pattern": "^\\.?[A-Za-z0-9_+-]+$"},
        },
    ],
}

_QUERY: dict[str, Any] = {
    "type": "object",
    "description": "Exactly one of css or xpath.",
    "properties": {
        "css": {"type": "string", "minLength": 1, "description": "A CSS selector (parsel)."},
        "xpath": {"type": "string", "minLength": 1, "description": "An XPath 1.0 expression."},
    },
    "additionalProperties": False,
}

_ITEM_TYPES: dict[str, Any] = {
    "description": (
        "An item type, or a list of them: a page yields the first whose match selects "
        "something (a type without match must be last)."
    ),
    "anyOf": [
        {"type": "string"},
        {"type": "array", "items": {"type": "string"}, "minItems": 1},
    ],
}

_PROCESSOR: dict[str, Any] = {
    "description": (
        "A processor name, or a one-key mapping from a processor name to its argument."
    ),
    "anyOf": [
        {"type": "string", "enum": list(BARE_PROCESSORS)},
        {
            "type": "object",
            "minProperties": 1,
            "maxProperties": 1,
            "properties": {
                "strip": {
                    "type": "string",
                    "description": "Strip these characters instead of whitespace.",
                },
                "join": {"type": "string", "description": "Separator placed between values."},
                "replace": {
                    "type": "array",
                    "description": "[regex, replacement] applied to every value (re.sub).",
                    "items": {"type": "string"},
                    "minItems": 2,
                    "maxItems": 2,
                },
                "date": {
                    "description": "strptime format(s), tried in order.",
                    "anyOf": [
                        {"type": "string", "minLength": 1},
                        {
                            "type": "array",
                            "items": {"type": "string", "minLength": 1},
                            "minItems": 1,
                        },
                    ],
                },
            },
            "additionalProperties": False,
        },
    ],
}

_FIELD: dict[str, Any] = {
    "type": "object",
    "description": "How one field is extracted: a selector, then re, processors, default.",
    "properties": {
        "css": {"type": "string", "minLength": 1, "description": "CSS selector (parsel)."},
        "xpath": {"type": "string", "minLength": 1, "description": "XPath expression."},
        "re": {
            "type": "string",
            "minLength": 1,
            "description": "Regex applied to each selected string; its groups if it has any.",
        },
        "processors": {"type": "array", "items": _PROCESSOR},
        "many": {
            "type": "boolean",
            "description": "Keep every value as a list (default: the first value only).",
        },
        "required": {
            "type": "boolean",
            "description": "An empty value is recorded in the item's _errors.",
        },
        "default": {"description": "Value used as-is when nothing is extracted."},
    },
    "additionalProperties": False,
}

_ITEM: dict[str, Any] = {
    "type": "object",
    "description": "An item type: its fields, or auto extraction.",
    "properties": {
        "fields": {
            "type": "object",
            "propertyNames": {"pattern": _NAME},
            "additionalProperties": _FIELD,
        },
        "key": {
            "description": "Field(s) whose values identify the item (default: the page URL).",
            "anyOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": {"type": "string"}, "minItems": 1},
            ],
        },
        "each": {
            **_QUERY,
            "description": "One item per node matched; field selectors are relative to it.",
        },
        "match": {
            **_QUERY,
            "description": "Only pages where this selects something yield this item type.",
        },
        "auto": {
            "type": "string",
            "enum": ["article"],
            "description": "Yield the raw page for a later extraction pipeline.",
        },
    },
    "additionalProperties": False,
}

_LINK_RULE: dict[str, Any] = {
    "type": "object",
    "description": "Which links to follow, and what the pages they lead to yield.",
    "properties": {
        "allow": {**_STRINGS, "description": "URL regexes; a link must match one."},
        "deny": {**_STRINGS, "description": "URL regexes; a link matching one is skipped."},
        "restrict_css": {**_STRINGS, "description": "Only links inside these regions."},
        "restrict_xpath": {**_STRINGS, "description": "Only links inside these regions."},
        "deny_extensions": {
            **_EXTENSIONS,
            "description": "Links to files with these extensions are skipped; replaces "
            "Scrapy's default list (images, archives, media, documents...); [] follows "
            "every extension.",
        },
        "allow_extensions": {
            **_EXTENSIONS,
            "description": "Extensions taken off the skipped list (e.g. svg, py).",
        },
        "follow": {
            "type": "boolean",
            "description": "Apply the link rules to the pages reached (default: true "
            "without item, false with item).",
        },
        "item": {
            **_ITEM_TYPES,
            "description": "The item type(s) the pages reached yield; with a list, the "
            "first whose match selects something.",
        },
        "max_depth": {"type": "integer", "minimum": 1},
    },
    "additionalProperties": False,
}

SPEC_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "crawlfleet spider spec",
    "description": "A Scrapy spider written as configuration; see docs/spec.md.",
    "type": "object",
    "properties": {
        "version": {"type": "integer", "enum": [SPEC_VERSION]},
        "name": {
            "type": "string",
            "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$",
            "description": "The spider name (and default job name).",
        },
        "start_urls": {"type": "array", "items": {"type": "string"}},
        "allowed_domains": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "start_item": {
            **_ITEM_TYPES,
            "description": "Item type(s) yielded by start pages and seeds no link rule "
            "places; with a list, the first whose match selects something.",
        },
        "max_depth": {
            "type": "integer",
            "minimum": 0,
            "description": "Links deeper than this are not followed (pagination excluded).",
        },
        "meta_refresh": {
            "enum": ["follow", "item", "ignore"],
            "description": "A page with <meta http-equiv=refresh>: follow its target, which "
            "yields what the page would (follow, the default); also yield the page's own "
            "item and links (item); or treat it as a plain page (ignore).",
        },
        "request": {
            "type": "object",
            "properties": {
                "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                "cookies": {"type": "boolean"},
                "meta": {"type": "object"},
            },
            "additionalProperties": False,
        },
        "settings": {
            "type": "object",
            "description": "Scrapy settings for this spider (spider priority).",
            "propertyNames": {"pattern": r"^[A-Z][A-Z0-9_]*$"},
        },
        "links": {"type": "array", "items": _LINK_RULE},
        "pagination": {
            **_QUERY,
            "description": "The next-page link; pages reached keep the page's item type.",
            "properties": {
                **_QUERY["properties"],
                "max_pages": {"type": "integer", "minimum": 1},
            },
        },
        "items": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": _NAME},
            "additionalProperties": _ITEM,
        },
    },
    "required": ["name", "items"],
    "additionalProperties": False,
}


def schema_json() -> str:
    """The text of ``docs/spec.schema.json``: :data:`SPEC_SCHEMA`, indented, newline-ended."""
    return json.dumps(SPEC_SCHEMA, indent=2) + "\n"


def _main(argv: list[str]) -> int:
    if len(argv) > 1:
        print("usage: python -m crawlfleet.spiders.schema [OUTPUT]", file=sys.stderr)
        return 2
    if argv:
        Path(argv[0]).write_text(schema_json(), encoding="utf-8")
    else:
        sys.stdout.write(schema_json())
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
