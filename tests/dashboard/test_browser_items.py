"""A job's items page in headless chromium: items written by the real SQL store
pipeline into the SQLite store the manager reads are listed newest first; a search by
URL finds one; the export link downloads JSON lines that parse; an item carrying script
payloads shows them as text. A viewer may do all of it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scrapy import Spider
from scrapy.utils.test import get_crawler

from crawlfleet.pipelines.sql import SqlStorePipeline
from tests.support.browser import Browser, screenshot, sign_in
from tests.support.hostile_site import PAYLOADS
from tests.support.live_manager import LiveManager, in_thread, running_manager
from tests.support.waiting import wait_until

JOB = "bookshop"
TITLES = ["A Tale of Two Cities", "Middlemarch", "Bleak House", "Dubliners", "Emma", "Persuasion"]


@pytest.fixture(scope="module")
def items_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('items') / 'items.sqlite3'}"


@pytest.fixture(scope="module")
def live_manager(
    redis_server_url: str, items_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveManager]:
    """The manager, reading items from the module's SQLite item store."""
    with running_manager(
        redis_server_url, tmp_path_factory.mktemp("manager"), CRAWLFLEET_SQL_URL=items_url
    ) as manager:
        yield manager


def store(items_url: str, items: list[dict[str, Any]]) -> None:
    """Store *items* one after another through the SQL store pipeline, as a node does."""
    crawler = get_crawler(
        Spider,
        settings_dict={
            "CRAWLFLEET_SQL_URL": items_url,
            "CRAWLFLEET_JOB": JOB,
            "CRAWLFLEET_STORE_BATCH_SECONDS": 0.01,
        },
    )
    pipeline = SqlStorePipeline.from_crawler(crawler)
    pipeline.open_spider(Spider(JOB))

    async def run() -> None:
        for item in items:
            await pipeline.process_item(item)  # returns once it is stored
            await asyncio.sleep(0.01)
        await pipeline.close_spider()

    in_thread(run)


def shown_keys(page: Any) -> list[str]:
    return [
        str(k)
        for k in page.locator(".stored-item").evaluate_all("els => els.map(e => e.dataset.key)")
    ]


def test_a_viewer_browses_searches_and_exports_a_jobs_items(
    live_manager: LiveManager, browser: Browser, items_url: str, tmp_path: Path
) -> None:
    books = [
        {
            "_type": "book",
            "url": f"https://books.test/catalogue/{i}-{title.lower().replace(' ', '-')}",
            "title": title,
            "price": round(9.5 + i * 1.25, 2),
            "in_stock": i % 2 == 0,
            "tags": ["fiction", "classic"][: 1 + i % 2],
        }
        for i, title in enumerate(TITLES)
    ]
    store(items_url, books)
    page = browser.page()
    sign_in(page, live_manager, "viewer")
    page.goto(f"{live_manager.url}/#/job/{JOB}")
    page.click("#job-items-link")
    page.wait_for_selector(".stored-item")
    wait_until("every item", lambda: len(shown_keys(page)) == len(TITLES))
    titles = page.locator(".stored-item dd").all_inner_texts()
    shown = [t for t in titles if t in TITLES]
    assert shown == list(reversed(TITLES))  # newest first
    assert page.locator(".stored-item .item-url a").first.get_attribute("href") == books[-1]["url"]
    screenshot(page, "dashboard-items.png", tmp_path)

    # a search by URL finds one
    page.fill("#items-q", "3-DUBLINERS")
    page.click("#items-form button[type=submit]")
    wait_until("the search", lambda: len(shown_keys(page)) == 1)
    assert "Dubliners" in page.inner_text("#items-list")

    # the export link carries the search: JSON lines, one item that parses
    with page.expect_download() as download:
        page.click("[data-export=jsonl]")
    lines = Path(download.value.path()).read_text().splitlines()
    assert [json.loads(line)["document"]["title"] for line in lines] == ["Dubliners"]
    assert download.value.suggested_filename == f"{JOB}-items.jsonl"

    # an item that attacks whoever looks at it shows as text, runs nothing
    time.sleep(0.01)
    store(
        items_url,
        [
            {
                "_type": "book",
                "url": "https://books.test/x?" + PAYLOADS["path"],
                "title": PAYLOADS["title"],
                "note": PAYLOADS["note"],
                "link": PAYLOADS["link"],
                "<b>field</b>": "<i>value</i>",
            }
        ],
    )
    page.fill("#items-q", "")
    page.click("#items-form button[type=submit]")
    wait_until("the new item", lambda: len(shown_keys(page)) == len(TITLES) + 1)
    first = page.locator(".stored-item").first.inner_text()
    for name in ("title", "note", "link"):
        assert PAYLOADS[name] in first, (name, first)
    assert "<b>field</b>" in first and "<i>value</i>" in first
    assert page.evaluate("window.__xss") is None
    assert page.locator("img, iframe, object, embed, b, i").count() == 0
    assert page.locator("a[href^=javascript]").count() == 0
    assert page.locator("script").count() == 1
    assert browser.outside == []
