"""The example specs crawl the bundled test site under vanilla Scrapy (no crawlfleet add-on).

Each crawl runs in a child process (a Twisted reactor cannot restart in this one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import TestSite
from tests.support.paths import EXAMPLES, ROOT

MODEL = SiteModel(pages=45, hosts=1, problems=False)
SETTINGS = {
    "LOG_LEVEL": "INFO",
    "TELNETCONSOLE_ENABLED": False,
    "ROBOTSTXT_OBEY": False,
    "CONCURRENT_REQUESTS": 32,
}


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    with TestSite(MODEL) as running:
        yield running


def run_child(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(cwd), str(ROOT / "src"), str(ROOT)])
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_scrapy_crawl_catalog_spec_in_a_project(site: TestSite, tmp_path: Path) -> None:
    """The documented project layout: a two-line spider module, then ``scrapy crawl``."""
    (tmp_path / "scrapy.cfg").write_text("[settings]\ndefault = shop.settings\n")
    package = tmp_path / "shop"
    (package / "spiders").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "settings.py").write_text(
        'SPIDER_MODULES = ["shop.spiders"]\n'
        + "".join(f"{k} = {v!r}\n" for k, v in SETTINGS.items())
    )
    (package / "spiders" / "__init__.py").write_text("")
    (package / "spiders" / "catalog.yaml").write_text(
        (EXAMPLES / "testsite_catalog.yaml").read_text(encoding="utf-8")
    )
    (package / "spiders" / "catalog.py").write_text(
        textwrap.dedent(
            """
            from crawlfleet.spiders import SpecSpider

            class CatalogSpider(SpecSpider):
                spec_path = "catalog.yaml"
            """
        )
    )
    start = f"http://127.0.0.1:{site.port}/catalog?page=1"
    out = tmp_path / "items.jsonl"
    argv = [sys.executable, "-m", "scrapy", "crawl", "testsite_catalog"]
    run_child([*argv, "-a", f"start_urls={start}", "-O", str(out)], tmp_path)

    items = {item["sku"]: item for item in read_lines(out)}
    products = [n for n in range(MODEL.pages) if not MODEL.is_article(n)]
    assert len(items) == len(products)
    for n in products:
        product = MODEL.product(n)
        item = items[product.sku]
        assert item["_type"] == "product"
        assert item["_key"] == product.sku
        assert item["url"] == site.url(n)
        assert item["title"] == product.title
        assert item["price"] == product.price  # a Decimal, written as a string
        assert item["listed"] == item["listed_text"] == product.date
        assert "_errors" not in item
    stats = site.stats()
    assert stats["fetched_twice"] == []
    # follow: false -- product pages' own links are not followed, and the catalogue is
    # walked by its next links only
    catalogue_pages = MODEL.catalog_page_count(0)
    assert stats["content_requests"] == MODEL.pages + catalogue_pages


def test_crawler_process_with_spec_argument(site: TestSite, tmp_path: Path) -> None:
    """``CrawlerProcess.crawl(SpecSpider, spec=PATH)``: the article spec in auto mode."""
    out = tmp_path / "articles.jsonl"
    script = textwrap.dedent(
        f"""
        from scrapy.crawler import CrawlerProcess
        from crawlfleet.spiders import SpecSpider

        settings = {SETTINGS!r}
        settings["FEEDS"] = {{{str(out)!r}: {{"format": "jsonlines"}}}}
        process = CrawlerProcess(settings)
        process.crawl(
            SpecSpider,
            spec={str(EXAMPLES / "testsite_articles.yaml")!r},
            start_urls=["http://127.0.0.1:{site.port}/catalog?page=1"],
        )
        process.start()
        """
    )
    done = run_child([sys.executable, "-c", script], tmp_path)
    assert "'spec/items': " in done.stderr

    items = read_lines(out)
    assert sorted(item["url"] for item in items) == sorted(site.url(n) for n in MODEL.article_ids)
    for item in items:
        n = int(item["url"].rsplit("/", 1)[1])
        assert item["_type"] == "article"
        assert item["_auto"] == "article"
        assert item["_key"] == item["url"]
        assert MODEL.article(n).headline in item["_html"]
        assert set(item) == {"_type", "url", "_key", "_auto", "_html", "_encoding"}


FULL_MODEL = SiteModel(pages=90, hosts=3)  # problems on: errors, redirects, odd files


def test_full_site_spec_yields_one_item_per_page(tmp_path: Path) -> None:
    """``examples/testsite.yaml`` on three hosts: every page fetched once, one item each.

    ``scrapy runspider`` with a two-line spider module; the port comes from
    ``-a start_urls=``.
    """
    (tmp_path / "full_site.py").write_text(
        textwrap.dedent(
            f"""
            from crawlfleet.spiders import SpecSpider

            class TestsiteSpider(SpecSpider):
                spec_path = {str(EXAMPLES / "testsite.yaml")!r}
            """
        )
    )
    out = tmp_path / "items.jsonl"
    with TestSite(FULL_MODEL) as site:
        argv = [sys.executable, "-m", "scrapy", "runspider", "full_site.py", "-O", str(out)]
        argv += ["-a", f"start_urls={','.join(site.seed_urls)}"]
        for name, value in SETTINGS.items():
            argv += ["-s", f"{name}={value}"]
        done = run_child(argv, tmp_path)
        stats = site.stats()
        article_urls = {site.url(n) for n in FULL_MODEL.article_ids}

    assert stats["never_fetched"] == []
    assert stats["fetched_twice"] == []  # start URLs are not dont_filter
    # status pages, /slow and the JSON feed are denied, the PNG skipped by extension
    assert stats["problem_requests"]
    assert all("/r/" in url for url in stats["problem_requests"])
    catalogue_pages = len(FULL_MODEL.catalog_locs())
    assert f"'spec/pages_unmatched': {catalogue_pages}," in done.stderr

    items = read_lines(out)
    products = [item for item in items if item["_type"] == "product"]
    articles = [item for item in items if item["_type"] == "article"]
    assert len(products) + len(articles) == len(items) == FULL_MODEL.pages
    assert len({(item["_type"], item["_key"]) for item in items}) == len(items)
    assert not [item for item in items if "_errors" in item]
    assert {item["_key"] for item in products} == {
        FULL_MODEL.product(n).sku for n in range(FULL_MODEL.pages) if not FULL_MODEL.is_article(n)
    }
    assert {item["url"] for item in articles} == article_urls
