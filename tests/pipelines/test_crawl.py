"""The whole item pipeline in a real Scrapy crawl of a local site, stored in SQLite.

Checks what unit tests cannot: Scrapy 2.19 calls every stage (async ones included)
without deprecation warnings, the charset middleware fixes real responses, and the
store flushes at close.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlfleet.pipelines.key import make_key
from crawlfleet.pipelines.quality import token_f1
from crawlfleet.pipelines.sql import SqlSink
from tests.support.article import PARAGRAPHS, TITLE, article_page

TRADITIONAL = "這是一個關於中文編碼偵測的測試頁面。我們希望偵測器能夠正確地識別出編碼。"
SIMPLIFIED = "这是一个关于中文编码侦测的测试页面。我们希望侦测器能够正确地识别出编码。"
# Characters GBK has no code for (CJK extensions A and B): GB18030's four-byte sequences
BEYOND_GBK = "中文𠀀㐀𪚥"

PAGES: dict[str, tuple[bytes, str]] = {
    "/article": (article_page().encode("utf-8"), "text/html; charset=utf-8"),
    # Big5 served as UTF-8: the charset middleware must notice.
    "/big5": (
        f"<html><head><title>繁體標題</title></head><body><p>{TRADITIONAL}</p></body></html>".encode(
            "big5"
        ),
        "text/html; charset=utf-8",
    ),
    "/empty": (b"<html><head><title></title></head><body></body></html>", "text/html"),
    # labelled gb2312 as many Chinese servers do, written in GB18030: browsers decode
    # every gb2312/gbk label with the GB18030 decoder (the WHATWG Encoding Standard)
    "/gb2312": (
        f"<html><head><title>中文</title></head><body><p>{BEYOND_GBK}</p></body></html>".encode(
            "gb18030"
        ),
        "text/html; charset=gb2312",
    ),
}

SPIDER = """
import json
import scrapy

class PipesSpider(scrapy.Spider):
    name = "pipes"
    custom_settings = json.loads({settings!r})

    async def start(self):
        for path in ("/article", "/big5", "/empty", "/gb2312"):
            yield scrapy.Request({base!r} + path)

    def parse(self, response):
        if response.url.endswith("/article"):
            yield {{"_type": "article", "url": response.url, "_html": response.text}}
        else:
            yield {{
                "_type": "page",
                "url": response.url,
                "title": response.css("title::text").get(),
                "body": response.css("p::text").get(),
            }}
"""


@pytest.fixture
def site() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body, content_type = PAGES[self.path]
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_crawl_through_every_stage_into_sqlite(site: str, tmp_path: Path) -> None:
    db = tmp_path / "items.sqlite3"
    settings = {
        "ITEM_PIPELINES": {
            "crawlfleet.pipelines.text.TextExtractionPipeline": 300,
            "crawlfleet.pipelines.encoding.EncodingPipeline": 400,
            "crawlfleet.pipelines.clean.CleanPipeline": 500,
            "crawlfleet.pipelines.validate.ValidatePipeline": 600,
            "crawlfleet.pipelines.key.KeyPipeline": 700,
            "crawlfleet.pipelines.sql.SqlStorePipeline": 800,
        },
        "DOWNLOADER_MIDDLEWARES": {"crawlfleet.pipelines.encoding.CharsetMiddleware": 580},
        "CRAWLFLEET_DATA_DIR": str(tmp_path / "data"),
        "CRAWLFLEET_SQL_URL": f"sqlite:///{db}",
        "CRAWLFLEET_CHINESE_CONVERT": "t2s",
        "CRAWLFLEET_VALIDATE_FIELDS": {"page": {"title": "str"}, "article": {"text": "str"}},
        "CRAWLFLEET_STORE_BATCH_SECONDS": 0.05,
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
    }
    spider = tmp_path / "pipes_spider.py"
    spider.write_text(
        textwrap.dedent(SPIDER).format(settings=json.dumps(settings), base=site), encoding="utf-8"
    )
    result = subprocess.run(
        [sys.executable, "-W", "default", "-m", "scrapy", "runspider", str(spider)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    log = result.stderr
    assert result.returncode == 0, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert "crawlfleet" not in "".join(
        line for line in log.splitlines() if "DeprecationWarning" in line
    ), log
    assert "Dropped invalid page item from " + site + "/empty: title: required, missing" in log
    assert "'crawlfleet/items/invalid/missing_field': 1" in log
    assert "'crawlfleet/store/sql/written': 3" in log

    sink = SqlSink(f"sqlite:///{db}")
    assert sink.count() == 3
    article = sink.get(make_key("article", [f"{site}/article"]))
    assert article is not None
    assert article.job == "pipes"
    assert article.document["title"] == TITLE
    assert article.document["author"] == "Jane Doe"
    assert token_f1(article.document["text"], "\n".join(PARAGRAPHS)) >= 0.9
    page = sink.get(make_key("page", [f"{site}/big5"]))
    assert page is not None
    assert page.document == {"url": f"{site}/big5", "title": "繁体标题", "body": SIMPLIFIED}
    page = sink.get(make_key("page", [f"{site}/gb2312"]))
    assert page is not None
    assert page.document == {"url": f"{site}/gb2312", "title": "中文", "body": BEYOND_GBK}
