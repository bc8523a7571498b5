"""The control room from the page, in headless chromium: an operator starts a run on a
real Scrapyd, sees it crawl and its node's failure on the job page, reads its log live
(filtered by level) and cancels it; a
campaign is paused and resumed from its page; an admin adds and removes proxies; a
viewer sees all of it and no control."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from crawlfleet.redis.embedded import free_port
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import TestSite
from tests.support.browser import Browser, screenshot, sign_in
from tests.support.cli import cli
from tests.support.live_manager import LiveManager
from tests.support.scrapyd_servers import Scrapyd, make_project
from tests.support.waiting import wait_until


def api(manager: LiveManager, role: str) -> httpx.Client:
    return httpx.Client(
        base_url=manager.url,
        headers={"Authorization": f"Bearer {manager.tokens[role]}"},
        timeout=60,
    )


@pytest.fixture(scope="module")
def scrapyd(
    live_manager: LiveManager, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scrapyd]:
    """A real Scrapyd registered with the module's manager, the test project deployed on
    it with ``crawlfleet deploy``."""
    folder = tmp_path_factory.mktemp("scrapyd")
    server = Scrapyd(folder / "scrapyd", free_port(), auth=False)
    server.start()
    try:
        with api(live_manager, "admin") as admin:
            r = admin.post("/api/v1/scrapyd", json={"name": "box-a", "url": server.url})
            assert r.status_code == 200, r.text
        project = make_project(folder / "project")
        deployed = cli(
            "deploy",
            "--manager",
            live_manager.url,
            cwd=project,
            timeout=300,
            CRAWLFLEET_MANAGER_TOKEN=live_manager.tokens["admin"],
        )
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        yield server
    finally:
        server.kill()


def process_rows(page: Any) -> list[str]:
    return [row.inner_text() for row in page.locator("#processes tbody tr").all()]


@pytest.mark.slow
def test_an_operator_starts_follows_and_cancels_a_run_and_a_viewer_only_reads(
    live_manager: LiveManager, browser: Browser, scrapyd: Scrapyd, tmp_path: Path
) -> None:
    job = "runs-page"
    # slow enough pages that the run is still crawling when it is cancelled
    model = SiteModel(pages=400, hosts=1, problems=False)
    with TestSite(model, latency_seconds=0.4) as site:
        page = browser.page()
        sign_in(page, live_manager, "operator")
        page.goto(f"{live_manager.url}/#/job/{job}")
        page.click("#job-runs-link")
        page.wait_for_selector("#run-form")
        # what Scrapyd holds fills the form
        assert page.locator("#run-project option").all_inner_texts() == ["fleetproj"]
        assert page.locator("#run-spider option").all_inner_texts() == ["site"]
        # a page the site does not have: its failure must reach the job page from the
        # Scrapyd-started node (its state DB is the manager's, passed by the run)
        missing = site.seed_urls[0].rstrip("/") + "/no-such-page"
        page.fill("#run-args", f"start_urls={site.seed_urls[0]},{missing}")
        page.fill("#run-settings", "not a setting")
        page.click("#run-form button[type=submit]")
        page.wait_for_selector("#run-form .error-text >> text=is not NAME=value")
        page.fill("#run-settings", "CONCURRENT_REQUESTS=2\nLOG_LEVEL=INFO")
        page.click("#run-form button[type=submit]")
        page.wait_for_selector("#toast >> text=Run started: 1 process(es) on box-a")
        row = page.locator("#processes tbody tr").first
        wait_until("the process shown running", lambda: "running" in row.inner_text(), 60)
        wait_until("the site crawled", lambda: site.stats()["total_requests"] >= 5, 60)
        screenshot(page, "dashboard-runs.png", tmp_path)

        # its log, live: Scrapy's lines come in while it runs; WARNING and above hides INFO
        page.click("#processes a[data-log]")
        page.wait_for_selector("#log-text")
        wait_until(
            "the log shows the crawl",
            lambda: (
                "crawlfleet" in page.inner_text("#log-text")
                and page.locator("#log-state .badge.running").count() == 1
            ),
            60,
        )

        def reads() -> int:
            page.wait_for_timeout(200)  # Playwright's sync API sees requests while it waits
            return sum("/processes/" in url and "/log?" in url for url in browser.requests)

        first = reads()
        wait_until("the log read again while it runs", lambda: reads() >= first + 2, 60)
        screenshot(page, "dashboard-log.png", tmp_path)
        infos = page.inner_text("#log-text").count("] INFO: ")
        assert infos > 0
        page.select_option("#log-level", "WARNING")
        assert "] INFO: " not in page.inner_text("#log-text")
        page.select_option("#log-level", "DEBUG")
        page.fill("#log-filter", "Spider opened")
        wait_until(
            "one line kept",
            lambda: (
                page.inner_text("#log-text").count("Spider opened") == 1
                and "] INFO: " in page.inner_text("#log-text")
                and page.inner_text("#log-text").count("\n") == 0
            ),
        )

        # a viewer sees the run and its log, and no control
        viewer = browser.page()
        sign_in(viewer, live_manager, "viewer")
        viewer.goto(f"{live_manager.url}/#/job/{job}/runs")
        viewer.locator("#processes tbody tr").first.wait_for()
        assert viewer.locator("#run-form").count() == 0
        assert viewer.locator("#processes [data-cancel]").count() == 0
        assert viewer.locator("#processes a[data-log]").count() == 1
        with api(live_manager, "viewer") as as_viewer:
            r = as_viewer.post(f"/api/v1/jobs/{job}/processes/1/cancel", json={})
            assert r.status_code == 403

        # the failure of the node Scrapyd started is on the job page
        page.goto(f"{live_manager.url}/#/job/{job}")
        page.wait_for_selector(f"#job-errors >> text={missing}", timeout=40_000)
        assert "HTTP 404" in page.inner_text("#job-errors")
        assert page.locator("[data-figure=errors-elsewhere]").count() == 0

        # cancel it from the page: TERM, and the node closes within the grace period
        page.click("#job-runs-link")
        page.click("#processes [data-cancel]")
        page.wait_for_selector("#confirm[open]")
        assert "TERM" in page.inner_text("#confirm-text")
        page.click("#confirm-ok")
        # TERM stops it within the grace period (on a loaded machine KILL may end it:
        # the toast and the row's note say which)
        page.wait_for_selector("#toast >> text=Process #1: cancelled", timeout=40_000)
        wait_until("shown cancelled", lambda: "cancelled" in process_rows(page)[0], 30)
        assert page.locator("#processes [data-cancel]").count() == 0
        fetched = site.stats()["total_requests"]
        assert fetched < 400, "the run ended by itself before the cancel: the test is void"
    assert browser.outside == []


def test_a_campaign_is_paused_and_resumed_from_its_page(
    live_manager: LiveManager, browser: Browser, tmp_path: Path
) -> None:
    with api(live_manager, "operator") as op:
        r = op.post(
            "/api/v1/campaigns",
            json={
                "name": "daily-news",
                "job": "news",
                "url": "http://127.0.0.1:9/{date}/{category}",
                "from": "2026-01-01",
                "to": "2026-01-31",
                "categories": ["world", "sport"],
            },
        )
        assert r.status_code == 201, r.text
    page = browser.page()
    sign_in(page, live_manager, "operator")
    page.click("#nav a[href='#/campaigns']")
    row = page.locator("#campaigns tbody tr", has=page.locator("a", has_text="daily-news"))
    row.wait_for()
    assert "0 of 62" in row.inner_text() and "running" in row.inner_text()
    row.locator("a", has_text="daily-news").click()
    page.wait_for_selector("#campaign-state .badge.running")
    assert page.inner_text("[data-figure=units-done]") == "0 of 62 units done (0.0%)"
    assert page.locator("[data-command=resume]").is_disabled()
    page.click("[data-command=pause]")
    page.click("#confirm-ok")
    page.wait_for_selector("#toast >> text=Campaign daily-news: paused")
    page.wait_for_selector("#campaign-state .badge.paused")
    assert page.locator("[data-command=pause]").is_disabled()
    screenshot(page, "dashboard-campaign.png", tmp_path)
    page.click("[data-command=resume]")
    page.click("#confirm-ok")
    page.wait_for_selector("#campaign-state .badge.running")
    page.fill("#campaign-extend-to", "2026-02-05")
    page.click("#campaign-extend button[type=submit]")
    page.wait_for_selector("#toast >> text=extended to 2026-02-05: 72 units")
    wait_until(
        "the new total shown", lambda: "of 72 units" in page.inner_text("#campaign-progress")
    )
    with api(live_manager, "viewer") as as_viewer:
        status = as_viewer.get("/api/v1/campaigns/daily-news").json()
    assert status["state"] == "running" and status["total"] == 72

    viewer = browser.page()
    sign_in(viewer, live_manager, "viewer")
    viewer.goto(f"{live_manager.url}/#/campaign/daily-news")
    viewer.wait_for_selector("#campaign-state .badge.running")
    assert viewer.locator("#campaign-controls button").count() == 0
    assert viewer.locator("#campaign-extend").count() == 0
    assert browser.outside == []


def test_an_admin_adds_and_removes_proxies_and_a_viewer_only_reads(
    live_manager: LiveManager, browser: Browser, tmp_path: Path
) -> None:
    page = browser.page()
    sign_in(page, live_manager, "admin")
    page.click("#nav a[href='#/proxies']")
    page.wait_for_selector("#proxies >> text=No proxy in the pool")
    page.fill("#proxies-add", "http://u:pr0xy-pass@127.0.0.7:3128\nhttp://127.0.0.8:8080")
    page.click("#proxies-form button[type=submit]")
    page.wait_for_selector("#toast >> text=2 proxy(ies) added; 2 live in the pool")
    rows = page.locator("#proxies tbody tr")
    wait_until("both listed", lambda: rows.count() == 2)
    assert "pr0xy-pass" not in page.content()
    assert "http://***@127.0.0.7:3128" in page.inner_text("#proxies")
    screenshot(page, "dashboard-proxies.png", tmp_path)
    target = rows.filter(has_text="127.0.0.8")
    target.locator("[data-remove]").click()
    page.click("#confirm-ok")
    page.wait_for_selector("#toast >> text=Proxy http://127.0.0.8:8080 removed")
    wait_until("shown removed", lambda: "removed" in target.inner_text())

    operator = browser.page()
    sign_in(operator, live_manager, "operator")
    operator.goto(f"{live_manager.url}/#/proxies")
    operator.locator("#proxies tbody tr").first.wait_for()
    assert operator.locator("#proxies-form").count() == 0
    assert operator.locator("#proxies [data-remove]").count() == 0
    assert browser.outside == []
