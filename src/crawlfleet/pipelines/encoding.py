"""Encoding stage: right codec for responses, valid UTF-8 in items.

- :class:`CharsetMiddleware` (downloader middleware) gives an ``HtmlResponse`` (any
  ``TextResponse``) the codec :func:`~crawlfleet.pipelines.charset.decode_body` finds when
  the body does not decode with the one Scrapy declared or inferred, so ``response.text``
  and selectors see the right characters. Enable it below ``HttpCompressionMiddleware``
  (590), so that it sees decompressed bodies, e.g.
  ``DOWNLOADER_MIDDLEWARES = {"crawlfleet.pipelines.encoding.CharsetMiddleware": 580}``.
  Stats: ``crawlfleet/encoding/responses_fixed``.
- :class:`EncodingPipeline` (item pipeline) makes every string of every public field
  storable (:func:`~crawlfleet.pipelines.charset.to_valid_utf8`), repairs mojibake
  (``CRAWLFLEET_ENCODING_FIX_MOJIBAKE``) and optionally converts Chinese script
  (``CRAWLFLEET_CHINESE_CONVERT``: ``t2s`` or ``s2t``; URLs are left alone). Stats:
  ``crawlfleet/encoding/items_changed``.
"""

from __future__ import annotations

import codecs
import logging
import re
from collections.abc import Callable
from typing import Any, Self

from itemadapter import ItemAdapter
from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.http import Response, TextResponse
from scrapy.statscollectors import StatsCollector

from crawlfleet.exceptions import ConfigError
from crawlfleet.pipelines._util import is_internal, map_strings
from crawlfleet.pipelines.charset import decode_body, fix_mojibake, to_valid_utf8
from crawlfleet.pipelines.labels import body_label, header_label
from crawlfleet.settings.access import get_bool, get_choice

__all__ = [
    "CHINESE_CONVERSIONS",
    "CharsetMiddleware",
    "EncodingPipeline",
    "decode_body",
    "fix_mojibake",
    "to_valid_utf8",
]

logger = logging.getLogger(__name__)

#: Accepted values of CRAWLFLEET_CHINESE_CONVERT ("" is off).
CHINESE_CONVERSIONS = ("", "t2s", "s2t")
_CJK_RE = re.compile("[\u3400-\u9fff\uf900-\ufaff]")
_URL_RE = re.compile(r"^\s*[a-z][a-z0-9+.-]*://", re.IGNORECASE)


class CharsetMiddleware:
    """Downloader middleware: re-declare the encoding of text responses that would
    otherwise decode wrongly (wrong or missing charset). Other responses pass as they are.
    """

    def __init__(self, stats: StatsCollector | None = None) -> None:
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Build with the crawler's stats collector."""
        return cls(stats=crawler.stats)

    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Response:
        """Return *response*, or a copy with the right ``encoding`` when it differs."""
        if not isinstance(response, TextResponse) or response.body.isascii():
            return response  # every ASCII-compatible codec reads ASCII alike
        content_type = response.headers.get(b"Content-Type") or b""
        declared = header_label(content_type.decode("latin-1")) or body_label(response.body)
        _, codec = decode_body(response.body, declared)
        current = _python_codec(response.encoding)
        if codec == current or (current == "ascii" and codec == "utf-8"):
            return response
        logger.debug(
            "Charset of %s: %s instead of %s (declared %s)",
            response.url,
            codec,
            current,
            declared,
        )
        if self.stats is not None:
            self.stats.inc_value("crawlfleet/encoding/responses_fixed")
        return response.replace(encoding=codec)


def _python_codec(name: str) -> str | None:
    """The codec Python decodes with for *name* (Scrapy's choice for a response, which
    follows its w3lib release: ``gbk`` for a page labelled gb2312 under w3lib 2.6)."""
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def _chinese_converter(conversion: str) -> Callable[[str], str] | None:
    if conversion == "":
        return None
    if conversion not in CHINESE_CONVERSIONS:
        raise ConfigError(
            f"CRAWLFLEET_CHINESE_CONVERT must be one of {CHINESE_CONVERSIONS}, got {conversion!r}"
        )
    from opencc import OpenCC  # imported here: loading the dictionaries takes a moment

    convert: Callable[[str], str] = OpenCC(conversion).convert
    return convert


class EncodingPipeline:
    """Item pipeline: storable UTF-8, mojibake repair, optional Chinese conversion.

    Fields whose names start with ``_`` are left alone. Values that are not strings
    (numbers ...) pass through; strings inside lists and dicts are handled too.
    """

    def __init__(
        self,
        *,
        fix_mojibake: bool = True,
        chinese_convert: str = "",
        stats: StatsCollector | None = None,
    ) -> None:
        self.fix_mojibake = fix_mojibake
        self.chinese_convert = chinese_convert
        self._convert = _chinese_converter(chinese_convert)
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Build from CRAWLFLEET_ENCODING_FIX_MOJIBAKE and CRAWLFLEET_CHINESE_CONVERT."""
        settings = crawler.settings
        return cls(
            fix_mojibake=get_bool(settings, "CRAWLFLEET_ENCODING_FIX_MOJIBAKE"),
            chinese_convert=get_choice(settings, "CRAWLFLEET_CHINESE_CONVERT", CHINESE_CONVERSIONS),
            stats=crawler.stats,
        )

    def fix_text(self, text: str) -> str:
        """One string, as this stage stores it."""
        if text.isascii() and "\x00" not in text:
            return text  # valid UTF-8 already; no mojibake and no Chinese script in ASCII
        fixed = to_valid_utf8(text)
        if self.fix_mojibake and not fixed.isascii():
            fixed = fix_mojibake(fixed)
        if self._convert is not None and _CJK_RE.search(fixed) and not _URL_RE.match(fixed):
            fixed = self._convert(fixed)
        return fixed

    def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        """Fix every string of *item* in place and return it."""
        adapter = ItemAdapter(item)
        changed = False
        for field in list(adapter.keys()):
            if is_internal(field):
                continue
            value = adapter[field]
            fixed = map_strings(value, self.fix_text)
            if fixed != value:
                adapter[field] = fixed
                changed = True
        if changed and self.stats is not None:
            self.stats.inc_value("crawlfleet/encoding/items_changed")
        return item
