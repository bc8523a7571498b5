"""Text extraction stage: title, author, date and main text of article pages.

Automatic article mode: a spider yields ``{"url": response.url, "_html": response.text}``
and :class:`TextExtractionPipeline` fills ``title``, ``author``, ``date`` (ISO
``YYYY-MM-DD``) and ``text`` (main text without navigation, ads, footers or comments;
paragraphs separated by line breaks) with trafilatura, then removes ``_html``. Fields the
spider already filled are kept. Items without ``_html`` pass through untouched.

Extraction is CPU-heavy, so it runs on a worker thread; the reactor stays free. Stats:
``crawlfleet/text/extracted``, ``crawlfleet/text/no_text`` (nothing found),
``crawlfleet/text/failed`` (trafilatura raised; logged as a warning, the item goes on).
"""

from __future__ import annotations

import logging
from typing import Any, Self

from itemadapter import ItemAdapter
from scrapy import Spider
from scrapy.crawler import Crawler
from scrapy.statscollectors import StatsCollector

from crawlfleet.pipelines._threads import run_in_thread
from crawlfleet.pipelines._util import is_empty, item_url, set_field
from crawlfleet.pipelines.charset import decode_body
from crawlfleet.settings.access import get_bool, get_choice

__all__ = ["ARTICLE_FIELDS", "FAVOR_CHOICES", "TextExtractionPipeline", "extract_article"]

logger = logging.getLogger(__name__)

#: Fields :func:`extract_article` returns and the pipeline fills.
ARTICLE_FIELDS = ("title", "author", "date", "text")
#: Accepted values of CRAWLFLEET_TEXT_FAVOR.
FAVOR_CHOICES = ("balanced", "precision", "recall")


def extract_article(
    html: str | bytes,
    url: str | None = None,
    *,
    favor: str = "balanced",
    include_tables: bool = True,
    include_comments: bool = False,
) -> dict[str, str | None]:
    """Extract an article from a page.

    Returns a dict with the keys of :data:`ARTICLE_FIELDS`; a value is None when it was
    not found. *html* may be bytes (decoded with
    :func:`~crawlfleet.pipelines.charset.decode_body`). The main text does not repeat the
    title when the page starts its body with it. Blocking and CPU-heavy: call it off the
    reactor.
    """
    if favor not in FAVOR_CHOICES:
        raise ValueError(f"favor must be one of {FAVOR_CHOICES}, got {favor!r}")
    if isinstance(html, bytes):
        html = decode_body(html, None)[0]
    result: dict[str, str | None] = dict.fromkeys(ARTICLE_FIELDS)
    if not html.strip():
        return result
    # imported at the first page to extract (a worker thread): most spiders never yield
    # "_html", and trafilatura is about 35 ms of a node's start
    import trafilatura

    document = trafilatura.bare_extraction(
        html,
        url=url,
        with_metadata=True,
        include_comments=include_comments,
        include_tables=include_tables,
        favor_precision=favor == "precision",
        favor_recall=favor == "recall",
    )
    if document is None:
        return result
    data: dict[str, Any] = document if isinstance(document, dict) else document.as_dict()
    for field in ARTICLE_FIELDS:
        value = data.get(field)
        result[field] = value.strip() if isinstance(value, str) and value.strip() else None
    title, text = result["title"], result["text"]
    if title and text:
        first, _, rest = text.partition("\n")
        if first.strip() == title and rest.strip():
            result["text"] = rest.strip()
    return result


class TextExtractionPipeline:
    """Item pipeline of the text extraction stage (see the module docstring)."""

    def __init__(
        self,
        *,
        favor: str = "balanced",
        include_tables: bool = True,
        include_comments: bool = False,
        stats: StatsCollector | None = None,
    ) -> None:
        if favor not in FAVOR_CHOICES:
            raise ValueError(f"favor must be one of {FAVOR_CHOICES}, got {favor!r}")
        self.favor = favor
        self.include_tables = include_tables
        self.include_comments = include_comments
        self.stats = stats
        self._warned_classes: set[type] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Build from the CRAWLFLEET_TEXT_* settings."""
        settings = crawler.settings
        return cls(
            favor=get_choice(settings, "CRAWLFLEET_TEXT_FAVOR", FAVOR_CHOICES),
            include_tables=get_bool(settings, "CRAWLFLEET_TEXT_INCLUDE_TABLES"),
            include_comments=get_bool(settings, "CRAWLFLEET_TEXT_INCLUDE_COMMENTS"),
            stats=crawler.stats,
        )

    def _inc(self, name: str) -> None:
        if self.stats is not None:
            self.stats.inc_value(f"crawlfleet/text/{name}")

    async def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        """Fill the article fields of an item that carries ``_html``; remove ``_html``."""
        adapter = ItemAdapter(item)
        html = adapter.get("_html")
        if html is None:
            return item
        url = item_url(adapter)
        try:
            article = await run_in_thread(
                extract_article,
                html,
                url,
                favor=self.favor,
                include_tables=self.include_tables,
                include_comments=self.include_comments,
            )
        except Exception as exc:
            logger.warning("Text extraction failed for %s: %s: %s", url, type(exc).__name__, exc)
            self._inc("failed")
            article = dict.fromkeys(ARTICLE_FIELDS)
        else:
            self._inc("extracted" if article["text"] else "no_text")
        undeclared = []
        for field, value in article.items():
            missing = value is not None and is_empty(adapter.get(field))
            if missing and not set_field(adapter, field, value):
                undeclared.append(field)
        if undeclared and type(item) not in self._warned_classes:
            self._warned_classes.add(type(item))
            logger.warning(
                "Item class %s does not declare the fields %s; their extracted values are dropped",
                type(item).__name__,
                ", ".join(undeclared),
            )
        del adapter["_html"]
        return item
