"""An operator at the dashboard, in headless chromium, while two real nodes crawl the
bundled test site: sign in, watch progress move without a reload, pause the job and see
both nodes pause (the site gets nothing meanwhile), resume, lower a site's limit and see
that site's rate follow, sign out. A viewer sees no control and the API refuses it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from crawlfleet.frontier.client import Frontier
from crawlfleet.node.backlog import WAITING_FOR_STORE
from crawlfleet.node.launcher import start_node
from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import JobKeys
from crawlfleet.redis.localcluster import RedisProcess
from crawlfleet.state.errors import Failure, record_failures
from crawlfleet.state.models import utcnow
from crawlfleet.testsite.model import SiteModel
from crawlfleet.testsite.server import TestSite
from tests.support.browser import Browser, screenshot, sign_in
from tests.support.frontier import track_pages
from tests.support.hostile_site import PAYLOADS, HostileSite
from tests.support.live_manager import LiveManager, in_thread, running_manager
from tests.support.paths import ROOT
from tests.support.waiting import wait_until

SPIDER = "crawlfleet.testsite.spider:TestSiteSpider"


def put_limits(manager: LiveManager, job: str, limits: dict[str, str]) -> None:
    r = httpx.put(
        f"{manager.url}/api/v1/jobs/{job}/limits",
        json={"limits": limits},
        headers={"Authorization": f"Bearer {manager.tokens['operator']}"},
    )
    r.raise_for_status()


def host_requests(site: TestSite, host: str) -> int:
    return int(site.stats(brief=True)["hosts"][host]["requests"])


def site_row(page: Any, site: str) -> dict[str, str]:
    """The job page's sites table: *site*'s row, column title -> text ({} if absent)."""
    table = page.locator("section", has=page.locator("h2", has_text="Sites")).locator("table")
    if table.count() == 0:
        return {}
    titles = table.locator("thead th").all_inner_texts()
    for row in table.locator("tbody tr").all():
        cells = row.locator("td").all_inner_texts()
        if cells and cells[0] == site:
            return dict(zip(titles, cells, strict=True))
    return {}


def figure(page: Any, name: str) -> str:
    return str(page.locator(f"[data-figure={name}]").first.inner_text())


@pytest.mark.slow
def test_an_operator_watches_pauses_and_limits_a_live_crawl(
    live_manager: LiveManager, browser: Browser, tmp_path: Path
) -> None:
    job = "dash"
    model = SiteModel(pages=900, hosts=2, problems=False)
    with TestSite(model, latency_seconds=0.05) as site:
        put_limits(live_manager, job, {"*": "10/1s"})  # about 20 pages/s over two hosts
        settings = {
            "CRAWLFLEET_KEY_PREFIX": live_manager.prefix,
            "CRAWLFLEET_DATA_DIR": str(tmp_path / "data"),
            "CONCURRENT_REQUESTS": 4,
            "CRAWLFLEET_HEARTBEAT_SECONDS": 0.3,
            "CRAWLFLEET_TELEMETRY_WINDOW_SECONDS": 2,
            "LOG_LEVEL": "INFO",
        }
        procs = [
            start_node(
                SPIDER,
                job=job,
                redis_url=live_manager.redis_url,
                log=tmp_path / f"node{i}.log",
                spider_args={"start_urls": ",".join(site.seed_urls)},
                settings=settings,
                cwd=ROOT,
            )
            for i in range(2)
        ]
        try:
            page = browser.page()
            page.goto(live_manager.url + "/")
            page.wait_for_selector("#login")
            page.fill("#token", "cft_wrong")
            page.click("#login button[type=submit]")
            wait_until("refused", lambda: "not valid" in page.inner_text("#login-error"))
            sign_in(page, live_manager, "operator")
            page.evaluate("window.__notReloaded = true")

            # the overview: the job with both nodes, its figures moving by themselves
            row = page.locator("tbody tr", has=page.locator(f"a[href='#/job/{job}']"))
            row.wait_for()
            page.wait_for_selector("[data-figure=nodes_alive]")
            wait_until("two nodes alive", lambda: figure(page, "nodes_alive") == "2")
            first = figure(page, "pages")
            wait_until("pages move", lambda: figure(page, "pages") != first)
            wait_until("chart drawn", lambda: page.locator("svg.chart path.line").count() == 1)
            screenshot(page, "dashboard-overview.png", tmp_path)

            # the job page: progress, sites with their limits, nodes
            row.locator("a").click()
            page.wait_for_selector("#job-progress [data-figure=done]")
            before = figure(page, "done")
            wait_until("progress moves", lambda: figure(page, "done") != before)
            wait_until("sites listed", lambda: site_row(page, "127.0.0.2") != {})
            assert site_row(page, "127.0.0.2")["limit /s"] == "10"
            wait_until("site rates", lambda: float(site_row(page, "127.0.0.1")["rate /s"]) > 3)
            wait_until("items shown", lambda: page.locator("#latest-items .item").count() > 0)
            screenshot(page, "dashboard-job.png", tmp_path)

            # pause, confirmed in the page's dialog: both nodes acknowledge and pause
            page.click("[data-command=pause]")
            page.wait_for_selector("dialog#confirm[open]")
            assert "2 live node(s)" in page.inner_text("#confirm-text")
            page.click("#confirm-ok")
            page.wait_for_selector("#toast >> text=acknowledged by 2 of 2 node(s)")
            wait_until(
                "both nodes paused",
                lambda: page.locator("span.badge.paused").count() >= 3,  # job + 2 nodes
            )
            assert page.inner_text("#job-state") == "paused"
            time.sleep(1.0)  # requests in flight at the pause end within this
            fetched = site.stats(brief=True)["content_fetched"]
            time.sleep(1.5)
            assert site.stats(brief=True)["content_fetched"] == fetched

            page.click("[data-command=resume]")
            page.click("#confirm-ok")
            wait_until("running again", lambda: page.inner_text("#job-state") == "running")

            # a site's limit lowered in the editor: the site's rate follows at once
            page.fill("#limits-form input[name=pattern]", "127.0.0.2")
            page.fill("#limits-form input[name=rate]", "2/1s")
            page.click("#limits-form button[type=submit]")
            page.wait_for_selector("#toast >> text=Limit of 127.0.0.2 set to 2/1s")
            wait_until("limit shown", lambda: site_row(page, "127.0.0.2").get("limit /s") == "2")
            time.sleep(1.0)
            start = host_requests(site, "127.0.0.2"), host_requests(site, "127.0.0.1")
            time.sleep(4.0)
            slow = host_requests(site, "127.0.0.2") - start[0]
            fast = host_requests(site, "127.0.0.1") - start[1]
            assert slow <= 2 * 4 + 2, slow  # 2/s now
            assert fast >= 20, fast  # the other site keeps its 10/s
            # the dashboard's rate of the site follows (a 2-s telemetry window)
            wait_until("rate follows", lambda: float(site_row(page, "127.0.0.2")["rate /s"]) <= 3)
            assert page.evaluate("window.__notReloaded") is True  # all of it without a reload

            # the fleet's limits, on the overview: set one, every job's nodes share it
            page.click("nav a[href='#/']")
            page.wait_for_selector("#fleet-limits >> text=No fleet limit")
            page.fill("#fleet-limits-form input[name=pattern]", "*.example.org")
            page.fill("#fleet-limits-form input[name=rate]", "3/1s")
            page.click("#fleet-limits-form button[type=submit]")
            page.wait_for_selector("#toast >> text=Limit of *.example.org set to 3/1s")
            page.wait_for_selector("#fleet-limits >> text=*.example.org")
            viewer = {"Authorization": f"Bearer {live_manager.tokens['viewer']}"}
            fleet = httpx.get(f"{live_manager.url}/api/v1/limits", headers=viewer)
            assert fleet.json() == {"limits": {"*.example.org": "3/1s"}}
            page.click("#fleet-limits button:has-text('remove')")
            page.wait_for_selector("#fleet-limits >> text=No fleet limit")

            # sign out: the form again, and the old session is gone for the API too
            page.click("#sign-out")
            page.wait_for_selector("#login")
            page.reload()
            page.wait_for_selector("#login")
            # before anyone signs in: no navigation and no "Sign out"
            assert not page.is_visible("#nav") and not page.is_visible("#sign-out")
            status = page.evaluate("fetch('/api/v1/jobs').then(r => r.status)")
            assert status == 401
        finally:
            for p in procs:
                p.kill()
            for p in procs:
                p.wait(30)
    assert browser.outside == []


def test_a_viewer_sees_no_control_and_cannot_change_anything(
    live_manager: LiveManager, browser: Browser
) -> None:
    job = "viewed"
    live_manager.beat(
        job,
        "node-v",
        {"state": "running", "pages_per_min": 120, "pages": 5, "host": "h", "concurrency": 4},
    )
    page = browser.page(width=390, height=844)  # a phone
    sign_in(page, live_manager, "viewer")
    page.goto(f"{live_manager.url}/#/job/{job}")
    page.wait_for_selector("#job-progress [data-figure=done]")
    page.wait_for_selector("text=node-v")
    assert page.locator("[data-command]").count() == 0
    assert page.locator("[data-node-command]").count() == 0
    assert page.locator("#limits-form, #seeds-form").count() == 0
    page.goto(f"{live_manager.url}/#/")
    page.wait_for_selector("#fleet-limits table, #fleet-limits >> text=No fleet limit")
    assert page.locator("#fleet-limits-form, #fleet-limits button").count() == 0
    page.goto(f"{live_manager.url}/#/job/{job}")
    page.wait_for_selector("text=node-v")
    # a forged change from the page, CSRF token and all, is refused for the role
    status = page.evaluate(
        """async (job) => {
            const me = await (await fetch('/session')).json();
            const r = await fetch(`/api/v1/jobs/${job}/control`, {method: 'POST',
                headers: {'Content-Type': 'application/json', 'X-CSRF-Token': me.csrf},
                body: JSON.stringify({command: 'pause'})});
            return r.status;
        }""",
        job,
    )
    assert status == 403
    page.goto(f"{live_manager.url}/#/nodes")
    page.wait_for_selector("text=node-v")
    assert page.locator("[data-node-command]").count() == 0
    assert browser.outside == []


@pytest.mark.slow
def test_what_comes_from_crawled_pages_is_shown_as_text_and_runs_nothing(
    live_manager: LiveManager, browser: Browser, tmp_path: Path
) -> None:
    job = "<b>xss<i>\"&'"  # a job name is text too
    with HostileSite() as site:
        node = start_node(
            "tests.support.hostile_site:HostileSpider",
            job=job,
            redis_url=live_manager.redis_url,
            log=tmp_path / "node.log",
            spider_args={"start_urls": site.url},
            settings={
                "CRAWLFLEET_KEY_PREFIX": live_manager.prefix,
                "CRAWLFLEET_DATA_DIR": str(tmp_path / "data"),
                "CRAWLFLEET_HEARTBEAT_SECONDS": 0.3,
                "DOWNLOAD_TIMEOUT": 120,
                "ROBOTSTXT_OBEY": False,
                "CRAWLFLEET_ITEM_STAGES": "key",  # no cleaning: the payloads stay whole
            },
            cwd=ROOT,
        )
        record_failures(  # a registered failure carries payloads too
            live_manager.db,
            [
                Failure(
                    job,
                    "ab" * 20,
                    site.url + "x?<script>",
                    "127.0.0.1",
                    "parse",
                    PAYLOADS["title"],
                    "<node>",
                    utcnow(),
                )
            ],
        )
        try:
            page = browser.page()
            dialogs: list[str] = []
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            sign_in(page, live_manager, "operator")
            page.get_by_text(job, exact=True).click()  # the overview's link, as text
            page.wait_for_selector("#latest-items .item")
            wait_until(
                "both pages' items",
                lambda: page.locator("#latest-items .item").count() >= 2,
                timeout=30,
            )
            shown = page.inner_text("#latest-items")
            for field in ("title", "note", "link"):
                assert PAYLOADS[field] in shown, (field, shown)
            assert "svg" in shown and "onload" in shown  # the URL with its payload, as text
            assert page.inner_text("#job-name") == job
            page.wait_for_selector("#job-errors table")
            assert PAYLOADS["title"] in page.inner_text("#job-errors")
            assert page.evaluate("window.__xss") is None
            assert dialogs == []
            # nothing of the payloads became an element: no image, SVG, inline frame, or
            # script but the dashboard's own; the javascript: value is no link
            assert page.locator("img, iframe, object, embed, b, i").count() == 0
            assert page.locator("#view svg").count() == page.locator("svg.chart").count()
            assert page.locator("script").count() == 1
            assert page.locator("a[href^=javascript]").count() == 0
        finally:
            node.kill()
            node.wait(30)
    assert browser.outside == []


def test_a_node_waiting_for_its_item_store_says_so(
    live_manager: LiveManager, browser: Browser
) -> None:
    """The node list shows a node's "waiting for the item store" state, coloured as a
    waiting one, on the job's page and on the nodes page; the job page shows the phase a
    node is in (a re-crawl round's progress)."""
    job = "stalled"
    phase = "Re-crawl round 1/2: 4 of 13 failure(s) re-fetched, 4 fixed, 0 failed again"
    live_manager.beat(
        job,
        "node-w",
        {"state": WAITING_FOR_STORE, "items_waiting": 212, "host": "h", "phase": phase},
    )
    page = browser.page()
    sign_in(page, live_manager, "viewer")
    page.goto(f"{live_manager.url}/#/job/{job}")
    page.wait_for_selector("[data-figure=phase]")
    assert page.inner_text("[data-figure=phase]") == f"node-w: {phase}"
    for where in (f"#/job/{job}", "#/nodes"):
        page.goto(f"{live_manager.url}/{where}")
        shown = page.locator("span.badge.waiting", has_text=WAITING_FOR_STORE)
        shown.wait_for()
        assert shown.inner_text() == WAITING_FOR_STORE
    assert browser.outside == []


def test_a_continuous_jobs_page_shows_how_fresh_its_copy_is(
    live_manager: LiveManager, browser: Browser
) -> None:
    """A job that revisits its pages: how many it tracks, the changes of the last hour,
    the copy's median age, and no ETA (it never ends)."""
    job = "fresh"

    async def track() -> None:
        client = make_client(live_manager.redis_url)
        try:
            frontier = Frontier(client, JobKeys.of(live_manager.prefix, job))
            await track_pages(frontier, "127.0.0.1:9", [60, 120, 180], changed=2)
        finally:
            await client.aclose()

    in_thread(track)
    page = browser.page()
    sign_in(page, live_manager, "viewer")
    page.goto(f"{live_manager.url}/#/job/{job}")
    page.wait_for_selector("[data-figure=tracked]")
    assert figure(page, "tracked") == "3"
    assert figure(page, "changes_last_hour") == "2"
    assert figure(page, "copy_age").startswith("2m ")  # the median of 1, 2 and 3 minutes
    assert figure(page, "revisits_behind") == "0"  # each due in a minute
    assert "continuous" in page.inner_text("[data-figure=eta]")
    assert browser.outside == []


def test_timers_scrapyd_and_alerts_pages(live_manager: LiveManager, browser: Browser) -> None:
    op = {"Authorization": f"Bearer {live_manager.tokens['operator']}"}
    r = httpx.post(
        f"{live_manager.url}/api/v1/timers",
        json={"name": "nightly", "job": "dash", "action": "pause", "cron": "0 3 * * *"},
        headers=op,
    )
    assert r.status_code == 200, r.text
    page = browser.page()
    sign_in(page, live_manager, "operator")
    page.click("#nav a[href='#/timers']")
    row = page.locator("tbody tr", has=page.locator("td", has_text="nightly"))
    row.wait_for()
    assert "0 3 * * *" in row.inner_text() and "yes" in row.inner_text()
    page.click("[data-timer=nightly]")  # disable, as an operator
    page.wait_for_selector("#toast >> text=Timer nightly disabled")
    wait_until("shown disabled", lambda: "no" in row.locator("td").all_inner_texts())
    timers = httpx.get(f"{live_manager.url}/api/v1/timers", headers=op).json()["timers"]
    assert [t["enabled"] for t in timers if t["name"] == "nightly"] == [False]
    page.click("#nav a[href='#/scrapyd']")
    page.wait_for_selector("text=No Scrapyd registered")
    page.click("#nav a[href='#/alerts']")
    page.wait_for_selector("text=No alert.")
    page.click("#nav a[href='#/nodes']")
    page.wait_for_selector("h1:has-text('Nodes')")
    assert browser.outside == []


def test_redis_stopping_under_the_dashboard_is_said_once_and_it_comes_back(
    browser: Browser, tmp_path: Path
) -> None:
    redis_proc = RedisProcess(tmp_path / "redis")
    redis_proc.start()
    try:
        with running_manager(redis_proc.url, tmp_path) as manager:
            manager.beat("steady", "node-s", {"state": "running", "pages_per_min": 60})
            page = browser.page(base=manager.url)
            sign_in(page, manager, "viewer")
            page.wait_for_selector("a[href='#/job/steady']")
            assert page.locator("#banner").is_hidden()
            redis_proc.kill()
            page.wait_for_selector("#banner:not([hidden])", timeout=20_000)
            assert "Redis did not answer" in page.inner_text("#banner")
            time.sleep(2.5)
            assert page.locator("#toast div").count() == 0  # one line, not a toast a second
            assert page.locator("a[href='#/job/steady']").count() == 1  # the last figures stay
            redis_proc.start()
            page.wait_for_selector("#banner", state="hidden", timeout=20_000)
    finally:
        redis_proc.kill()
