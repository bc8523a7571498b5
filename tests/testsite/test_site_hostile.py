"""The test site's hostile mode: bans by User-Agent and by IP, flaky URLs of every kind,
the captcha page, accounting, reset, validation and the ``crawlfleet site`` flags."""

from __future__ import annotations

import argparse
import http.client
import logging
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

from crawlfleet.cli import site as site_cli
from crawlfleet.testsite import Hostile, SiteModel, SiteServer, TestSite
from crawlfleet.testsite.archive import category_names
from crawlfleet.testsite.hostile import FLAKY_KINDS
from crawlfleet.testsite.process import (
    fetch_stats,
    site_command,
    start_site_process,
    stop_site_process,
)

SMALL = SiteModel(pages=12, hosts=2, seed=5, problems=False)
ARCHIVED = SiteModel(
    pages=20, hosts=2, seed=4, problems=False, archive_dates=2, archive_categories=("a", "b")
)
FAILURE_STATUS = {"503": 503, "429": 429, "500": 500, "captcha": 302}


def request(
    url: str,
    *,
    method: str = "GET",
    agent: str | None = None,
    source: str | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request on a new connection, from source address ``source`` if given."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(
        parts.hostname or "",
        parts.port,
        timeout=5,
        source_address=None if source is None else (source, 0),
    )
    try:
        headers = {} if agent is None else {"User-Agent": agent}
        conn.request(method, parts.path + (f"?{parts.query}" if parts.query else ""), b"", headers)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def statuses(url: str, count: int, **kwargs: Any) -> list[int]:
    """``count`` requests in a row; skips the test if they took a second or more."""
    started = time.monotonic()
    result = [request(url, **kwargs)[0] for _ in range(count)]
    if time.monotonic() - started >= 0.9:
        pytest.skip("the machine is too slow for a burst within one second")
    return result


# -- configuration -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ban_rate": -1}, "ban_rate must be >= 0"),
        ({"ban_rate": 2.5}, "ban_rate must be an integer"),
        ({"ban_seconds": 0}, "ban_seconds must be a number > 0"),
        ({"ban_seconds": float("inf")}, "ban_seconds must be a number > 0"),
        ({"ban_by": "host"}, "ban_by must be 'ip' or 'ua'"),
        ({"flaky": 1.5}, "flaky must be a share between 0 and 1"),
        ({"flaky": True}, "flaky must be a share between 0 and 1"),
        ({"flaky_attempts": 0}, "flaky_attempts must be an integer >= 1"),
        ({"flaky_kinds": ("503", "404")}, "flaky_kinds must be distinct kinds out of"),
        ({"flaky_kinds": ()}, "flaky_kinds must be distinct kinds out of"),
        ({"flaky_kinds": ("503", "503")}, "flaky_kinds must be distinct kinds out of"),
        ({"flaky_kinds": "503"}, "flaky_kinds must be a sequence"),
    ],
)
def test_validation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Hostile(**kwargs)


def test_server_checks_its_hostile_argument() -> None:
    with pytest.raises(ValueError, match="hostile must be a Hostile"):
        SiteServer(SMALL, hostile={"ban_rate": 3})


def test_the_flaky_plan_is_seeded_and_exact() -> None:
    hostile = Hostile(flaky=0.3, flaky_attempts=2)
    plan = hostile.flaky_locs(ARCHIVED)
    docs = {(0, path) for path in ARCHIVED.archive.doc_path_list()}
    eligible = ARCHIVED.content_locs() | docs
    assert len(plan) == round(0.3 * len(eligible)) and set(plan) <= eligible
    assert set(plan) & docs, "archive documents can be flaky"
    per_kind = Counter(plan.values())
    assert (
        set(per_kind) == set(FLAKY_KINDS) and max(per_kind.values()) - min(per_kind.values()) <= 1
    )
    assert Hostile(flaky=0.3, flaky_attempts=2).flaky_locs(ARCHIVED) == plan
    other = SiteModel(
        pages=20, hosts=2, seed=5, problems=False, archive_dates=2, archive_categories=("a", "b")
    )
    assert hostile.flaky_locs(other) != plan
    only = Hostile(flaky=1.0, flaky_kinds=["drop", "500"]).flaky_locs(ARCHIVED)
    assert set(only) == eligible and set(only.values()) == {"drop", "500"}
    assert Hostile().flaky_locs(ARCHIVED) == {}
    urls = hostile.flaky_urls(ARCHIVED, 8080)
    assert all(url.startswith("http://127.0.0.") for url in urls) and len(urls) == len(plan)


def test_nothing_is_hostile_by_default() -> None:
    assert not Hostile().enabled
    with TestSite(SMALL) as site:
        assert statuses(site.seed_urls[0], 30, agent="bot") == [200] * 30
        assert request(f"http://127.0.0.1:{site.port}/captcha")[0] == 404
        stats = site.stats()
        assert site.flaky_urls() == {}
        assert stats["unknown_requests"] == {f"http://127.0.0.1:{site.port}/captcha": 1}
        assert stats["hostile"] == {
            "ban_by": "ip",
            "bans": {},
            "denied": {},
            "banned_requests": 0,
            "banned_now": [],
            "flaky_urls": 0,
            "flaky_served": dict.fromkeys(FLAKY_KINDS, 0),
            "captcha_requests": 0,
        }


# -- bans --------------------------------------------------------------------------------


def test_ban_by_user_agent() -> None:
    with TestSite(SMALL, hostile=Hostile(ban_rate=3, ban_seconds=30, ban_by="ua")) as site:
        url = site.url(2)
        assert statuses(url, 5, agent="greedy") == [200, 200, 200, 403, 403]
        status, _, body = request(site.url(3), agent="greedy")
        assert status == 403 and b"Access denied" in body
        assert request(url, agent="polite")[0] == 200
        assert request(url, agent="polite", source="127.0.0.2")[0] == 200
        # never hostile, even for a banned client
        base = f"http://127.0.0.1:{site.port}"
        assert request(f"{base}/robots.txt", agent="greedy")[0] == 200
        assert request(f"{base}/_stats", agent="greedy")[0] == 200
        status, _, body = request(f"{base}/captcha", agent="greedy")
        assert status == 200 and b"Please solve the captcha" in body
        stats = site.stats()
        hostile = stats["hostile"]
        assert hostile["ban_by"] == "ua"
        assert hostile["bans"] == {"greedy": 1}
        assert hostile["denied"] == {"greedy": 3} and hostile["banned_requests"] == 3
        assert hostile["banned_now"] == ["greedy"] and hostile["captcha_requests"] == 1
        assert stats["requests"] == {url: 5}  # 403 answers are no fetches
        assert stats["total_requests"] == 5


def test_a_ban_expires() -> None:
    with TestSite(SMALL, hostile=Hostile(ban_rate=2, ban_seconds=0.4, ban_by="ua")) as site:
        url = site.url(1)
        assert statuses(url, 4, agent="bot") == [200, 200, 403, 403]
        time.sleep(0.45)
        assert site.stats()["hostile"]["banned_now"] == []
        assert statuses(url, 3, agent="bot") == [200, 200, 403]
        assert site.stats()["hostile"]["bans"] == {"bot": 2}


def test_ban_by_peer_address() -> None:
    with TestSite(SMALL, hostile=Hostile(ban_rate=2, ban_seconds=30)) as site:
        url = site.url(2)  # on host 127.0.0.1
        assert statuses(url, 3, source="127.0.0.2") == [200, 200, 403]
        assert request(url, source="127.0.0.2", agent="someone else")[0] == 403
        assert request(site.url(3), source="127.0.0.2")[0] == 403  # every host
        assert request(url, source="127.0.0.3")[0] == 200
        assert request(url, source="127.0.0.1")[0] == 200
        hostile = site.stats()["hostile"]
        assert hostile["bans"] == {"127.0.0.2": 1}
        assert hostile["denied"] == {"127.0.0.2": 3}


def test_reset_lifts_bans_and_forgets_attempts() -> None:
    hostile = Hostile(ban_rate=4, ban_seconds=30, ban_by="ua", flaky=1.0, flaky_kinds=("503",))
    with TestSite(SMALL, hostile=hostile) as site:
        url = site.url(5)
        # the failure counts in the window too: the fifth request is one too many
        assert statuses(url, 5, agent="bot") == [503, 200, 200, 200, 403]
        status, _, _ = request(f"http://127.0.0.1:{site.port}/_reset", method="POST", agent="bot")
        assert status == 200
        assert site.stats()["hostile"]["flaky_served"]["503"] == 0
        assert site.stats()["hostile"]["bans"] == {}
        assert statuses(url, 2, agent="bot") == [503, 200]


# -- flaky URLs --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def flaky_site() -> Iterator[TestSite]:
    with TestSite(ARCHIVED, hostile=Hostile(flaky=1.0, flaky_attempts=2)) as site:
        yield site


def check_failure(kind: str, url: str) -> None:
    if kind == "drop":
        with pytest.raises(ConnectionError):
            request(url)
        return
    status, headers, _ = request(url)
    assert status == FAILURE_STATUS[kind], (kind, url)
    if kind in ("503", "429"):
        assert headers["Retry-After"] == "1"
    if kind == "captcha":
        parts = urlsplit(url)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        assert headers["Location"] == f"/captcha?next={quote(path, safe='/')}"


def test_each_kind_fails_k_times_then_serves(flaky_site: TestSite) -> None:
    flaky_site.reset()
    plan = flaky_site.flaky_urls()
    assert len(plan) == len(flaky_site.expected_urls()) + len(ARCHIVED.archive.doc_path_list())
    chosen = {kind: min(url for url, k in plan.items() if k == kind) for kind in FLAKY_KINDS}
    for kind, url in chosen.items():
        check_failure(kind, url)
        check_failure(kind, url)
        for _ in range(2):
            status, _, body = request(url)
            assert status == 200 and body.startswith(b"<!DOCTYPE html>"), (kind, url)
    stats = flaky_site.stats()
    assert stats["hostile"]["flaky_served"] == dict.fromkeys(FLAKY_KINDS, 2)
    assert stats["hostile"]["flaky_urls"] == len(plan)
    assert stats["requests"] == dict.fromkeys(chosen.values(), 2)  # failures are no fetches


def test_a_flaky_archive_document(flaky_site: TestSite) -> None:
    flaky_site.reset()
    unit = next(u for u in ARCHIVED.archive_units() if ARCHIVED.archive.doc_count(u))
    url = ARCHIVED.archive_doc_urls(unit, flaky_site.port)[0]
    kind = flaky_site.flaky_urls()[url]
    check_failure(kind, url)
    check_failure(kind, url)
    assert request(url)[0] == 200
    listing = ARCHIVED.archive_unit_url(unit, flaky_site.port)
    assert listing not in flaky_site.flaky_urls() and request(listing)[0] == 200
    assert flaky_site.stats()["archive"]["requests"] == {listing: 1, url: 1}


def test_the_captcha_page(flaky_site: TestSite) -> None:
    flaky_site.reset()
    url = min(url for url, kind in flaky_site.flaky_urls().items() if kind == "captcha")
    status, headers, _ = request(url)
    assert status == 302
    status, _, body = request(f"http://{urlsplit(url).netloc}{headers['Location']}")
    assert status == 200 and b"Please solve the captcha" in body
    stats = flaky_site.stats()
    assert stats["hostile"]["captcha_requests"] == 1
    assert stats["total_requests"] == 0 and stats["unknown_requests"] == {}


# -- the command line --------------------------------------------------------------------


def test_the_site_command_passes_archive_and_hostile_options() -> None:
    model = SiteModel(
        pages=10, hosts=1, problems=False, archive_dates=3, archive_categories=category_names(2)
    )
    hostile = Hostile(ban_rate=50, ban_seconds=2.5, flaky=0.5, flaky_kinds=("503",))
    argv = site_command(model, hostile=hostile)
    for flag in (
        "--archive-dates=3",
        "--archive-categories=2",
        "--archive-start=2026-01-01",
        "--ban-rate=50",
        "--ban-seconds=2.5",
        "--ban-by=ip",
        "--flaky=0.5",
        "--flaky-attempts=1",
        "--flaky-kinds=503",
    ):
        assert flag in argv
    assert not any(arg.startswith(("--archive", "--ban", "--flaky")) for arg in site_command(SMALL))
    with pytest.raises(ValueError, match="archive_categories must be c00"):
        site_command(ARCHIVED)
    proc, port = start_site_process(model, hostile=hostile)
    try:
        plan = hostile.flaky_urls(model, port)
        url = min(plan)
        assert [request(url)[0] for _ in range(2)] == [503, 200]
        unit = model.archive_units()[-1]
        assert request(model.archive_unit_url(unit, port))[0] == 200
        stats = fetch_stats(port, brief=True)
        assert stats["hostile"]["flaky_urls"] == len(plan)
        assert stats["hostile"]["flaky_served"]["503"] == 1
        assert stats["archive"]["total_requests"] == 1
    finally:
        assert stop_site_process(proc) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--archive-dates=3"], "archive_categories must not be empty"),
        (["--archive-categories=-1"], "archive_categories must be an integer >= 0"),
        (["--archive-start=2026-13-01"], "archive_start must be a date YYYY-MM-DD"),
        (["--ban-rate=-2"], "ban_rate must be >= 0"),
        (["--ban-seconds=0"], "ban_seconds must be a number > 0"),
        (["--ban-by=cookie"], "ban_by must be 'ip' or 'ua'"),
        (["--flaky=1.5"], "flaky must be a share between 0 and 1"),
        (["--flaky-attempts=0"], "flaky_attempts must be an integer >= 1"),
        (["--flaky-kinds=503,404"], "flaky_kinds must be distinct kinds out of"),
    ],
)
def test_bad_flags_are_one_clear_error(
    args: list[str], message: str, caplog: pytest.LogCaptureFixture
) -> None:
    parser = argparse.ArgumentParser()
    site_cli.add_arguments(parser)
    # an invalid port too: should the option pass, run() fails instead of serving
    namespace = parser.parse_args([*args, "--port=70000"])
    with caplog.at_level(logging.ERROR):
        assert site_cli.run(namespace) == 2
    assert len(caplog.records) == 1
    assert caplog.records[0].getMessage().startswith(f"invalid option: {message}")


def test_a_bad_flag_in_a_child_process() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "crawlfleet.cli.site", "--flaky-kinds=503,teapot"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "flaky_kinds must be distinct kinds out of" in lines[0]
