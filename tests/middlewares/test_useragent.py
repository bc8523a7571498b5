"""Browser identities: the BrowserHeaders middleware alone (sticky per site, a spider's
own headers kept, Sec-Fetch-Site from the Referer), browserforge's identities repaired
and consistent, a User-Agent file, one-line errors; then a real node on a loopback site
that records what it receives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from scrapy import Request, Spider

from crawlfleet.exceptions import ConfigError
from crawlfleet.middlewares.useragent import (
    BrowserHeaders,
    browser_identities,
    consistent,
    family,
    file_identities,
)
from crawlfleet.node.launcher import start_node
from tests.support.loopback import LoopbackSite

ROOT = Path(__file__).resolve().parents[2]
SPIDER = Spider(name="s")


def headers(mw: BrowserHeaders, url: str, **kwargs: object) -> dict[str, str]:
    request = Request(url, **kwargs)  # type: ignore[arg-type]
    mw.process_request(request, SPIDER)
    return {k.decode(): v[0].decode() for k, v in request.headers.items()}


def test_browser_identities_are_consistent() -> None:
    identities = browser_identities(60)
    assert len({i["User-Agent"] for i in identities}) > 3  # a real choice of browsers
    for identity in identities:
        low = {k.lower(): v for k, v in identity.items()}
        ua = low["user-agent"]
        assert ua.startswith("Mozilla/5.0") and "accept-encoding" not in low
        if "sec-fetch-mode" in low:
            assert low["sec-fetch-mode"] == "navigate" and low["sec-fetch-dest"] == "document"
        hint = low.get("sec-ch-ua")
        if hint is not None:  # client hints only from Chromium, naming the UA's version
            assert family(ua) == "chrome"
            major = re.search(r"Chrome/(\d+)", ua)
            assert major is not None and f'v="{major.group(1)}"' in hint


def test_one_identity_per_site_and_a_spiders_headers_win() -> None:
    pool = [{"User-Agent": f"UA{i}", "Accept": "a", "Sec-Fetch-Site": "x"} for i in range(50)]
    mw = BrowserHeaders(pool)
    a = {headers(mw, f"http://a.test/{i}")["User-Agent"] for i in range(20)}
    b = {headers(mw, f"http://b.test/{i}")["User-Agent"] for i in range(20)}
    assert len(a) == 1 and len(b) == 1
    per_request = BrowserHeaders(pool, sticky="request")
    assert len({headers(per_request, "http://a.test/")["User-Agent"] for _ in range(40)}) > 1
    own = headers(mw, "http://a.test/x", headers={"User-Agent": "mine"})
    assert own["User-Agent"] == "mine" and own["Accept"] == "a"
    assert headers(mw, "http://a.test/")["Sec-Fetch-Site"] == "none"
    linked = headers(mw, "http://a.test/2", headers={"Referer": "http://a.test/1"})
    assert linked["Sec-Fetch-Site"] == "same-origin"
    away = headers(mw, "http://a.test/2", headers={"Referer": "http://b.test/1"})
    assert away["Sec-Fetch-Site"] == "cross-site"
    robots = headers(mw, "http://a.test/robots.txt", meta={"dont_obey_robotstxt": True})
    assert "User-Agent" not in robots
    with pytest.raises(ConfigError, match="CRAWLFLEET_USER_AGENT_STICKY"):
        BrowserHeaders(pool, sticky="page")


def test_a_user_agent_file(tmp_path: Path) -> None:
    f = tmp_path / "agents.txt"
    f.write_text(
        "# desktop\nMozilla/5.0 (X11; Linux x86_64; rv:140.0) Gecko/20100101 Firefox/140.0\n\n"
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/147.0.0.0 Safari/537.36\n"
    )
    firefox, chrome = file_identities(str(f))
    assert firefox["Accept"].startswith("text/html") and "image/avif" not in firefox["Accept"]
    assert "image/avif" in chrome["Accept"]
    with pytest.raises(ConfigError, match="cannot read"):
        file_identities(str(tmp_path / "missing.txt"))
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(ConfigError, match="no User-Agent"):
        file_identities(str(tmp_path / "empty.txt"))


@pytest.mark.slow
def test_a_node_browses_a_site_as_one_browser(
    redis_server_url: str, node_env: dict[str, str], tmp_path: Path
) -> None:
    def page(path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        links = "".join(f'<a href="/p{i}">p</a>' for i in range(8)) if path == "/" else ""
        return 200, f"<html><body>{links}</body></html>".encode()

    with LoopbackSite(page) as site:
        node = start_node(
            "crawlfleet.testsite.spider:TestSiteSpider",
            job="ua",
            redis_url=redis_server_url,
            log=tmp_path / "node.log",
            spider_args={"start_urls": site.url},
            settings={
                **node_env,
                "CRAWLFLEET_USER_AGENTS": "browser",
                "ROBOTSTXT_OBEY": True,
                "CRAWLFLEET_HEARTBEAT_SECONDS": 0.3,
                "CRAWLFLEET_FINISH_GRACE_SECONDS": 1,
            },
            cwd=ROOT,
        )
        assert node.wait(90) == 0, (tmp_path / "node.log").read_text()[-3000:]
    pages = [(path, {k.lower(): v for k, v in h.items()}) for path, h in site.headers]
    robots = [h for path, h in pages if path == "/robots.txt"]
    crawled = [h for path, h in pages if path != "/robots.txt"]
    assert len(crawled) == 9 and len(robots) == 1
    assert "Scrapy" in robots[0]["user-agent"]  # robots.txt: the crawl's own name
    assert len({h["user-agent"] for h in crawled}) == 1  # one browser for the site
    ua = crawled[0]["user-agent"]
    assert ua.startswith("Mozilla/5.0") and "Scrapy" not in ua
    assert crawled[0]["accept-language"] != "en"  # the browser's, not Scrapy's default
    first = next(h for path, h in pages if path == "/")
    if "sec-fetch-site" in first:
        assert first["sec-fetch-site"] == "none"
        assert {h["sec-fetch-site"] for path, h in pages if path.startswith("/p")} == {
            "same-origin"
        }


def test_an_identity_whose_hints_name_another_version_is_not_consistent() -> None:
    old_ua = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/107.0.0.0 Safari/537.36"
    hints = '"Chromium";v="147", "Not.A/Brand";v="8"'
    assert not consistent({"User-Agent": old_ua, "sec-ch-ua": hints})
    assert consistent({"User-Agent": old_ua.replace("107", "147"), "sec-ch-ua": hints})
    assert consistent({"User-Agent": "Mozilla/5.0 (X11; rv:140.0) Gecko/20100101 Firefox/140.0"})
    assert all(consistent(i) for i in browser_identities(300))
