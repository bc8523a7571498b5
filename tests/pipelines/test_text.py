"""Text extraction on synthetic article pages with boilerplate, and the token F1 helper."""

# ruff: noqa: RUF001 - Chinese and Japanese text uses full-width punctuation on purpose

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import scrapy
from scrapy.utils.test import get_crawler

from crawlfleet.pipelines.quality import token_f1, token_scores, tokenize
from crawlfleet.pipelines.text import TextExtractionPipeline, extract_article
from tests.support.article import PARAGRAPHS, TITLE, article_page


def test_token_f1_helper() -> None:
    assert tokenize("Hello, World! 中文字 abc_def 42") == [
        "hello", "world", "中", "文", "字", "abc", "def", "42"
    ]  # fmt: skip
    assert token_f1("the cat sat", "the cat sat") == 1.0
    assert token_f1("dog", "cat") == 0.0
    assert token_f1("", "") == 1.0
    assert token_f1("", "cat") == 0.0
    score = token_scores("the cat sat down", "the cat sat")
    assert (score.precision, score.recall) == (0.75, 1.0)
    assert score.f1 == pytest.approx(2 * 0.75 / 1.75)


def test_extract_article_removes_boilerplate() -> None:
    article = extract_article(article_page(), "https://news.test/rivers")
    assert article["title"] == TITLE
    assert article["author"] == "Jane Doe"
    assert article["date"] == "2024-03-05"
    text = article["text"]
    assert text is not None
    truth = "\n".join(PARAGRAPHS)
    assert token_f1(text, truth) >= 0.9
    for boilerplate in ("cookies", "Advertisement", "Related story", "Copyright", "Great article"):
        assert boilerplate not in text


def test_extract_article_chinese_page_from_bytes() -> None:
    paragraphs = [
        "北方的河流在冬季的大部分时间里都会结冰，沿岸的村庄早已学会了与冰共存。渔民们在冰面上凿洞，"
        "把渔网放到冰下，每天清晨都要去查看。",
        "春天，解冻来得非常突然。不到一个星期，河水就会上涨，把大块的浮冰冲向下游，"
        "村民们必须为可能淹到一楼的洪水做好准备。",
        "科学家们记录解冻的时间已经超过一百年。记录显示，如今河冰破裂的时间比一九二零年早了大约十一天。",
    ]
    html = article_page(paragraphs, title="北方河流提前解冻").encode("gb18030")
    html = html.replace(b'charset="utf-8"', b'charset="gbk"')
    article = extract_article(html, "https://news.test/zh")
    assert article["title"] == "北方河流提前解冻"
    assert token_f1(article["text"] or "", "\n".join(paragraphs)) >= 0.9


def test_extract_article_on_empty_or_odd_input() -> None:
    assert extract_article("", None) == dict.fromkeys(("title", "author", "date", "text"))
    assert extract_article("<html></html>", None)["text"] is None
    with pytest.raises(ValueError, match="favor"):
        extract_article("<p>x</p>", None, favor="speed")


def test_pipeline_fills_fields_off_thread_and_removes_html() -> None:
    crawler = get_crawler(settings_dict={"CRAWLFLEET_TEXT_FAVOR": "precision"})
    pipeline = TextExtractionPipeline.from_crawler(crawler)
    assert pipeline.favor == "precision"
    item: dict[str, Any] = {
        "_type": "article",
        "url": "https://news.test/rivers",
        "_html": article_page(),
        "author": "Spider Said",
    }
    plain = {"url": "https://news.test/x", "title": "no html"}

    async def run() -> tuple[Any, Any]:
        return await pipeline.process_item(item), await pipeline.process_item(dict(plain))

    out, untouched = asyncio.run(run())
    assert out is item
    assert "_html" not in item
    assert item["title"] == TITLE
    assert item["author"] == "Spider Said"  # the spider's value is kept
    assert item["date"] == "2024-03-05"
    assert token_f1(item["text"], "\n".join(PARAGRAPHS)) >= 0.9
    assert untouched == plain
    assert crawler.stats is not None
    assert crawler.stats.get_value("crawlfleet/text/extracted") == 1


class Page(scrapy.Item):
    url = scrapy.Field()
    _html = scrapy.Field()
    text = scrapy.Field()


def test_pipeline_warns_once_about_undeclared_item_fields(caplog: pytest.LogCaptureFixture) -> None:
    pipeline = TextExtractionPipeline()
    items = [Page(url="https://news.test/a", _html=article_page()) for _ in range(2)]

    async def run() -> None:
        for item in items:
            await pipeline.process_item(item)

    with caplog.at_level(logging.WARNING, logger="crawlfleet.pipelines.text"):
        asyncio.run(run())
    assert token_f1(items[0]["text"], "\n".join(PARAGRAPHS)) >= 0.9
    assert "_html" not in items[1]
    warnings = [r for r in caplog.records if "does not declare" in r.getMessage()]
    assert len(warnings) == 1
    assert "fields title, author, date" in warnings[0].getMessage()
