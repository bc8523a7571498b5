"""crawlfleet.pipelines: item processing and storage.

Stages, in their ``ITEM_PIPELINES`` order: text extraction -> encoding -> clean ->
validate -> key -> store(s). See ``docs/pipelines.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Each public name and the module it comes from, imported when first asked for: a node
#: whose stages import one module of the package does not import the others (the SQL
#: store's SQLAlchemy alone is a tenth of a node's start).
_HOMES = {
    "CharsetMiddleware": "encoding",
    "CleanPipeline": "clean",
    "EncodingPipeline": "encoding",
    "InvalidItem": "validate",
    "ItemKeyer": "key",
    "ItemSink": "sinks",
    "KeyPipeline": "key",
    "SqlSink": "sql",
    "SqlStorePipeline": "sql",
    "StorePipeline": "store",
    "StoredItem": "sinks",
    "TextExtractionPipeline": "text",
    "ValidatePipeline": "validate",
    "clean_text": "clean",
    "decode_body": "charset",
    "extract_article": "text",
    "fix_mojibake": "charset",
    "make_key": "key",
    "to_valid_utf8": "charset",
    "token_f1": "quality",
    "token_scores": "quality",
}

if TYPE_CHECKING:
    from crawlfleet.pipelines.charset import decode_body, fix_mojibake, to_valid_utf8
    from crawlfleet.pipelines.clean import CleanPipeline, clean_text
    from crawlfleet.pipelines.encoding import CharsetMiddleware, EncodingPipeline
    from crawlfleet.pipelines.key import ItemKeyer, KeyPipeline, make_key
    from crawlfleet.pipelines.quality import token_f1, token_scores
    from crawlfleet.pipelines.sinks import ItemSink, StoredItem
    from crawlfleet.pipelines.sql import SqlSink, SqlStorePipeline
    from crawlfleet.pipelines.store import StorePipeline
    from crawlfleet.pipelines.text import TextExtractionPipeline, extract_article
    from crawlfleet.pipelines.validate import InvalidItem, ValidatePipeline


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


__all__ = [
    "CharsetMiddleware",
    "CleanPipeline",
    "EncodingPipeline",
    "InvalidItem",
    "ItemKeyer",
    "ItemSink",
    "KeyPipeline",
    "SqlSink",
    "SqlStorePipeline",
    "StorePipeline",
    "StoredItem",
    "TextExtractionPipeline",
    "ValidatePipeline",
    "clean_text",
    "decode_body",
    "extract_article",
    "fix_mojibake",
    "make_key",
    "to_valid_utf8",
    "token_f1",
    "token_scores",
]
