"""End to end: vanilla Scrapy runs TestSiteSpider over the whole site, problems on."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

import crawlfleet.testsite
from crawlfleet.testsite import SiteModel, TestSite
from crawlfleet.testsite.render import render_site
from crawlfleet.testsite.spider import TestSiteSpider

SPIDER = Path(crawlfleet.testsite.__file__).parent / "spider.py"


def test_spider_imports_nothing_from_crawlfleet() -> None:
    tree = ast.parse(SPIDER.read_text())
    modules = [
        name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
        )
    ]
    assert modules and not [m for m in modules if m.startswith("crawlfleet")]


def test_vanilla_scrapy_crawls_everything_once(tmp_path: Path) -> None:
    model = SiteModel()
    env = {
        key: value
        for key, value in os.environ.items()
        if "proxy" not in key.lower() and not key.startswith("SCRAPY_")
    }
    with TestSite(model, timeout_seconds=10) as site:
        items_file = tmp_path / "items.jsonl"
        argv = [
            sys.executable, "-m", "scrapy", "runspider", str(SPIDER),
            "-a", "start_urls=" + ",".join(site.seed_urls),
            "-o", f"{items_file}:jsonlines",
            # /slow times out (it answers after 10 s); an ordinary page on a loaded
            # machine must not (at 1 s one did, and its retry fetched it twice)
            "-s", "DOWNLOAD_TIMEOUT=3",
            "-s", "ROBOTSTXT_OBEY=True",
            "-s", "TELNETCONSOLE_ENABLED=False",
            "-s", "CONCURRENT_REQUESTS=32",
            "-s", "LOG_LEVEL=INFO",
        ]  # fmt: skip
        done = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-3000:]
        stats = site.stats()
    items = [json.loads(line) for line in items_file.read_text().splitlines()]
    assert stats["never_fetched"] == []
    assert stats["fetched_twice"] == []
    assert stats["unknown_requests"] == {}
    assert len(items) == model.pages == len({item["url"] for item in items})
    articles = [item for item in items if "headline" in item]
    assert len(articles) == len(model.article_ids)
    assert all(item["title"] and item["price"] and item["sku"] for item in items if "sku" in item)
    problems = stats["problem_requests"]
    assert all(problems[url] == 3 for url in model.problem_urls(site.port) if "/status/500" in url)
    assert all(problems[url] == 3 for url in model.problem_urls(site.port) if url.endswith("/slow"))
    assert set(problems) == model.problem_urls(site.port)
    assert all(count == 1 for count in stats["robots_requests"].values())
    by_url = {item["url"]: item for item in items}
    for n, case in model.encoded_pages.items():
        if case.declared_correctly:
            assert by_url[site.url(n)]["title"] == case.title


def test_start_urls_from_argument_or_setting() -> None:
    async def urls(spider: TestSiteSpider) -> list[str]:
        return [request.url async for request in spider.start()]

    spider = TestSiteSpider(start_urls="http://127.0.0.1:9/, http://127.0.0.2:9/")
    assert spider.start_urls == ["http://127.0.0.1:9/", "http://127.0.0.2:9/"]
    crawler = get_crawler(TestSiteSpider, {"TESTSITE_START_URLS": ["http://127.0.0.3:9/"]})
    from_setting = TestSiteSpider.from_crawler(crawler)
    assert asyncio.run(urls(from_setting)) == ["http://127.0.0.3:9/"]


def test_extract_item_reads_products_and_articles() -> None:
    model = SiteModel(pages=40, hosts=2, problems=False)
    site = render_site(model, 80)
    for n in (0, 5, min(model.article_ids)):
        url = model.url(n, 80)
        response = HtmlResponse(url, body=site[model.loc_of(n)].body, encoding="utf-8")
        item = TestSiteSpider.extract_item(response)
        if model.is_article(n):
            article = model.article(n)
            assert item == {
                "url": url,
                "headline": article.headline,
                "author": article.author,
                "date": article.date,
            }
        else:
            product = model.product(n)
            assert item == {
                "url": url,
                "title": product.title,
                "price": product.price,
                "date": product.date,
                "sku": product.sku,
            }
    catalog = HtmlResponse("http://127.0.0.1:80/catalog?page=1", body=b"<ol></ol>")
    assert TestSiteSpider.extract_item(catalog) is None
