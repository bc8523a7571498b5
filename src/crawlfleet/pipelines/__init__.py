"""crawlfleet.pipelines: item processing and storage.

Stages, in their ``ITEM_PIPELINES`` order: text extraction -> encoding -> clean ->
validate -> key -> store(s). See ``docs/pipelines.md``.
"""

from __future__ import annotations

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
