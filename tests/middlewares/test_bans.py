"""Ban detection: what a ban looks like (a status, a redirect to a captcha or login
page, a body pattern), a banned request sent back to the frontier under a new browser
identity, and recorded in the error registry once its retries are spent; then a real
node against a loopback site that bans the first browser it sees."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from scrapy import Request, Spider
from scrapy.http import HtmlResponse

from crawlfleet.exceptions import ConfigError
from crawlfleet.meta import BAN_META, NEW_IDENTITY_META
from crawlfleet.middlewares.bans import BanDetector, Banned, _patterns
from crawlfleet.middlewares.useragent import BrowserHeaders
from crawlfleet.node.launcher import start_node
from crawlfleet.state.db import StateDB
from crawlfleet.state.errors import list_errors
from tests.support.loopback import LoopbackSite

ROOT = Path(__file__).resolve().parents[2]
SPIDER = Spider(name="s")


def detector(retries: int = 2) -> BanDetector:
    return BanDetector(
        None,
        statuses={403},
        url_patterns=_patterns("u", ["captcha", "/login"]),
        body_patterns=_patterns("b", ["unusual traffic"]),
        retries=retries,
    )


def response(
    url: str, status: int = 200, body: bytes = b"<html></html>", **meta: object
) -> HtmlResponse:
    request = Request("http://a.test/p", meta=dict(meta))
    return HtmlResponse(url, status=status, body=body, request=request)


def req(response: HtmlResponse) -> Request:
    assert response.request is not None
    return response.request


def test_what_a_ban_looks_like() -> None:
    d = detector()
    r = response("http://a.test/p", 403)
    assert d.why_banned(req(r), r) == "HTTP 403"
    r = response("http://a.test/captcha?from=p", redirect_urls=["http://a.test/p"])
    assert d.why_banned(req(r), r) == "redirected to http://a.test/captcha?from=p"
    r = response("http://a.test/p", body=b"<p>We saw Unusual Traffic from you</p>")
    assert d.why_banned(req(r), r) == "page matches 'unusual traffic'"
    for fine in (
        response("http://a.test/p"),
        response("http://a.test/p", 404),
        response("http://a.test/p", 429),  # a back-off, not a ban
        response("http://a.test/login", body=b"ok"),  # a login page linked, not a redirect
    ):
        assert d.why_banned(req(fine), fine) is None
    with pytest.raises(ConfigError, match="is not a regular expression"):
        _patterns("CRAWLFLEET_BAN_BODY_PATTERNS", ["(unclosed"])


def test_a_ban_is_tried_again_under_a_new_identity_then_given_up() -> None:
    d = detector(retries=2)
    r = response("http://a.test/p", 403)
    retry = d.process_response(req(r), r, SPIDER)
    assert isinstance(retry, Request) and retry.dont_filter
    assert retry.meta[BAN_META] == 1 and retry.meta[NEW_IDENTITY_META] is True
    second = d.process_response(retry, response("http://a.test/p", 403), SPIDER)
    assert second.meta[BAN_META] == 2
    with pytest.raises(Banned, match="banned 3 time"):
        d.process_response(second, response("http://a.test/p", 403), SPIDER)

    # the identity middleware then drops the refused identity's headers for a new one
    pool = [{"User-Agent": f"UA{i}", f"X-Only-{i}": "1"} for i in range(2)]
    headers = BrowserHeaders(pool, choose=lambda ids: ids[0])
    first = Request("http://a.test/1")
    headers.process_request(first, SPIDER)
    assert first.headers["User-Agent"] == b"UA0"
    banned = first.replace(meta={**first.meta, NEW_IDENTITY_META: True})
    headers.process_request(banned, SPIDER)
    assert banned.headers["User-Agent"] == b"UA1" and b"X-Only-0" not in banned.headers
    later = Request("http://a.test/2")  # the site's identity is the new one from now on
    headers.process_request(later, SPIDER)
    assert later.headers["User-Agent"] == b"UA1"


@pytest.mark.slow
def test_a_node_gets_past_a_site_that_bans_its_first_browser(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    banned: set[str] = set()

    def page(path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        ua = headers.get("User-Agent", "")
        if path == "/robots.txt":
            return 404, b""
        if not banned:
            banned.add(ua)  # the first browser it sees is banned for good
        if ua in banned or path == "/p7":  # and /p7 refuses everyone
            return 403, b"<html>go away</html>"
        links = "".join(f'<a href="/p{i}">p</a>' for i in range(8)) if path == "/" else ""
        return 200, f"<html><body>{links}</body></html>".encode()

    db_url = f"sqlite:///{tmp_path / 'state.sqlite3'}"
    with LoopbackSite(page) as site:
        node = start_node(
            "crawlfleet.testsite.spider:TestSiteSpider",
            job="bans",
            redis_url=redis_server_url,
            log=tmp_path / "node.log",
            spider_args={"start_urls": site.url},
            settings={
                **node_env,
                "CRAWLFLEET_USER_AGENTS": "browser",
                "CRAWLFLEET_STATE_DB_URL": db_url,
                "CRAWLFLEET_BACKOFF_START_SECONDS": 0.05,
                "CRAWLFLEET_BACKOFF_MAX_SECONDS": 0.2,
                "CRAWLFLEET_HEARTBEAT_SECONDS": 0.3,
                "CRAWLFLEET_FINISH_GRACE_SECONDS": 1,
            },
            cwd=ROOT,
        )
        assert node.wait(120) == 0, (tmp_path / "node.log").read_text()[-3000:]
    log = (tmp_path / "node.log").read_text()
    agents = {h.get("User-Agent") for path, h in site.headers if path != "/robots.txt"}
    assert len(agents) >= 2  # the banned browser was replaced
    ok = {path for path, h in site.headers if h.get("User-Agent") not in banned and path != "/p7"}
    assert ok >= {"/", *(f"/p{i}" for i in range(7))}  # every page but /p7 got through
    assert site.hits["/p7"] >= 3  # tried, then tried twice again
    assert re.search(r"'crawlfleet/bans/gave_up': 1\b", log), log[-2000:]
    db = StateDB.open(db_url)
    try:
        (row,) = list_errors(db, "bans")
        assert row["url"].endswith("/p7") and row["reason"] == "ban"
        assert row["detail"] == "HTTP 403" and row["http_status"] == 403
    finally:
        db.close()


def test_a_redirect_ban_retries_the_page_first_asked_and_robots_txt_is_left_alone() -> None:
    d = detector()
    redirected = Request(
        "http://a.test/login?next=/p",
        meta={"redirect_urls": ["http://a.test/p"], "redirect_times": 1, "k": "v"},
    )
    r = HtmlResponse("http://a.test/login?next=/p", body=b"", request=redirected)
    retry = d.process_response(redirected, r, SPIDER)
    assert retry.url == "http://a.test/p" and retry.meta["k"] == "v"
    assert "redirect_urls" not in retry.meta and "redirect_times" not in retry.meta
    robots = Request("http://a.test/robots.txt", meta={"dont_obey_robotstxt": True})
    answer = HtmlResponse("http://a.test/robots.txt", status=403, body=b"", request=robots)
    assert d.process_response(robots, answer, SPIDER) is answer
